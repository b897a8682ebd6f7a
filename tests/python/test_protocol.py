"""opd.protocol mirrors include/opd/protocol.h; libopd agrees; the ABI
structs have opd.h's sizes; every code has an exception class."""
import ctypes
import os
import pickle
import re

import opd
from opd import _lib, errors, protocol
from conftest import REPO

HEADER = os.path.join(REPO, "include", "opd", "protocol.h")


def _macro_rows(name):
    text = open(HEADER).read()
    m = re.search(r"#define %s\(X\)(.*?)\n\n" % name, text, re.S)
    assert m, name
    return re.findall(r"X\(([^)]*)\)", m.group(1))


def test_errors_match_header():
    rows = []
    for r in _macro_rows("OPD_ERRNO_MAP"):
        n, v, msg = [x.strip() for x in r.split(",", 2)]
        rows.append((n, int(v), msg.strip('"')))
    assert tuple(rows) == protocol.ERRORS


def test_dtypes_match_header():
    rows = []
    for r in _macro_rows("OPD_DTYPE_MAP"):
        _, v, size, s = [x.strip() for x in r.split(",")]
        rows.append((s.strip('"'), int(v), int(size)))
    assert tuple(rows) == protocol.DTYPES


def test_attr_types_match_header():
    rows = [(s.strip().strip('"'), int(v)) for _, v, s in
            (r.split(",") for r in _macro_rows("OPD_ATTR_TYPE_MAP"))]
    assert tuple(rows) == protocol.ATTR_TYPES


def test_limits_match_header():
    text = open(HEADER).read()
    for name in ("MAX_RANK", "MAX_TENSORS", "MAX_ATTRS", "MAX_NAME", "PROTOCOL_VERSION"):
        v = re.search(r"#define OPD_%s (\d+)" % name, text).group(1)
        assert getattr(protocol, name) == int(v)


def test_libopd_agrees():
    lib = _lib.load()
    for n, v, msg in protocol.ERRORS:
        assert lib.opd_errname(v).decode() == n
        assert lib.opd_strerror(v).decode() == msg
    for n, v, size in protocol.DTYPES:
        assert lib.opd_dtype_name(v).decode() == n
        assert lib.opd_dtype_size(v) == size
        assert lib.opd_dtype_from_name(n.encode()) == v
    assert opd.lib_version() == opd.__version__


def test_struct_layouts():
    assert ctypes.sizeof(_lib.TensorDesc) == 160
    assert ctypes.sizeof(_lib.AttrDesc) == 104
    assert _lib.AttrDesc.f.offset == 24 and _lib.AttrDesc.ints.offset == 40


def test_every_code_has_a_class_and_pickles():
    for n, v, msg in protocol.ERRORS:
        cls = errors.ERROR_CLASSES[v]
        e = errors.error(v, "boom " + n)
        assert type(e) is cls and isinstance(e, opd.OpdError)
        assert e.code == v and e.name == n and e.message == "boom " + n
        assert n in str(e)
        e2 = pickle.loads(pickle.dumps(e))
        assert type(e2) is cls and e2.code == v and e2.message == e.message
    assert issubclass(opd.BadArgumentError, ValueError)
    assert issubclass(opd.OpdConnectionError, ConnectionError)
    assert issubclass(opd.OpdTimeoutError, TimeoutError)
