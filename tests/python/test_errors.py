"""Every error kind a client can meet, with the class and the daemon's
message; codes a client cannot provoke are covered by test_protocol."""
import ctypes
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import opd
from opd import _lib, errors
from opd.tensor import Tensor
from conftest import REPO
from _forks import in_child


def raises(cls, name, f, *words):
    with pytest.raises(cls) as e:
        f()
    assert e.value.name == name, e.value
    for w in words:
        assert w in e.value.message, e.value
    return e.value


def test_bad_arguments(c):
    x = c.empty((4, 8))
    B = opd.BadArgumentError
    raises(B, "EDTYPE", lambda: c.relu(c.empty(3, "int32")), "relu", "int32")
    raises(B, "EARITY", lambda: c.run("softmax", x, x, x), "softmax")
    raises(B, "EARITY", lambda: c.run("softmax", x, out=(x, x)))
    raises(B, "ENOOP", lambda: c.run("no_such_op", x), "no_such_op")
    raises(B, "EATTR", lambda: c.softmax(x, foo=1), "foo")
    raises(B, "EATTR", lambda: c.layernorm(x, eps="a"), "eps")
    raises(B, "EATTR", lambda: c.gelu(x, approximate="erf"), "approximate")
    raises(B, "EATTR", lambda: c.run("nms", c.empty((3, 4)), c.empty(3)), "iou_threshold")
    raises(B, "EATTR", lambda: c.conv2d(c.empty((1, 1, 3, 3)), c.empty((1, 1, 1, 1)),
                                        stride=[1] * 9))
    raises(B, "ESHAPE", lambda: c.matmul(x, x), "matmul")
    raises(B, "ELAYOUT", lambda: c.softmax(x, out=Tensor(x.arena, x.offset, "float32",
                                                         (4, 8), (0, 1))), "overlap")
    raises(B, "ELAYOUT", lambda: c.relu(Tensor(x.arena, 2, "float32", (4,))), "aligned")
    a = c.empty((8, 8))
    raises(B, "EALIAS", lambda: c.matmul(a, a, out=a), "overlaps")
    raises(B, "EBOUNDS", lambda: c.relu(Tensor(x.arena, x.arena.size - 16, "float32", (8,))),
           "outside")
    raises(B, "EOVERFLOW", lambda: c.relu(Tensor(x.arena, 0, "float32", (1 << 40, 1 << 40))))
    raises(B, "EINVAL", lambda: c.layernorm(x, None, c.empty(8)), "None")
    raises(B, "EINVAL", lambda: x.permute(0, 0))
    h = c._handle()
    raises(B, "EARENA", lambda: errors.check(_lib.load().opd_arena_release(h, 987654)),
           "987654")
    with tempfile.TemporaryFile() as f:
        f.write(b"x" * 4096)
        f.flush()
        aid = ctypes.c_uint64()
        raises(B, "EFD", lambda: errors.check(_lib.load().opd_arena_register_fd(
            h, f.fileno(), 4096, ctypes.byref(aid))), "memfd")


def test_limits_and_timeouts(c):
    x = c.empty(4)
    raises(opd.LimitError, "ELIMIT", lambda: c.noop(*[x] * 17), "16")
    raises(opd.LimitError, "ELIMIT", lambda: c.relu(Tensor(x.arena, 0, "float32", (1,) * 9)))
    big = c.empty((1500, 1500))
    r = c.submit("matmul", big, big)
    raises(opd.OpdTimeoutError, "ETIMEDOUT", lambda: r.wait(0))
    assert r.wait().shape == (1500, 1500)     # still pending, then done
    # a tensor over the daemon's arena limit: named, before any memfd
    raises(opd.LimitError, "ELIMIT", lambda: c.empty((2 ** 62,)),
           "float32", "max_arena_bytes", str(2 ** 64))


def test_state_after_fork_is_handled(c):
    # libopd refuses a connection used across fork (ESTATE); Client reconnects
    h = c._handle()

    def child():
        rc = _lib.load().opd_ping(h)
        c.ping()
        return rc == opd.protocol.ESTATE
    assert in_child(child)


def test_daemon_not_running(tmp_path):
    path = str(tmp_path / "absent.sock")
    e = raises(opd.OpdConnectionError, "ECONNECT", lambda: opd.connect(path), path)
    assert "opd --socket" in e.message and isinstance(e, ConnectionError)
    lazy = opd.connect(path, connect=False)       # lazy: fails on first use
    raises(opd.OpdConnectionError, "ECONNECT", lazy.ping)


def test_closed_client(c):
    c.close()
    raises(opd.OpdConnectionError, "ECLOSED", c.ping, "closed")
    raises(opd.OpdConnectionError, "ECLOSED", lambda: c.empty(3))


def test_daemon_goes_away(start_daemon):
    d = start_daemon()
    c = opd.connect(d.socket)
    x = c.from_numpy(np.ones(4, np.float32))
    c.relu(x)
    assert d.stop() == 0
    with pytest.raises(opd.OpdConnectionError) as ei:
        for _ in range(3):
            c.relu(x)
    assert ei.value.name in ("ECLOSED", "ESHUTDOWN", "EIO")
    assert x.tolist() == [1, 1, 1, 1]            # memory stays readable
    c.close()


def test_library_not_found(tmp_path):
    # a copy of the package outside the tree, with OPD_LIB pointing nowhere
    import shutil
    shutil.copytree(os.path.join(REPO, "python", "opd"), tmp_path / "opd")
    env = dict(os.environ, OPD_LIB=str(tmp_path / "nope.so"), PYTHONPATH=str(tmp_path))
    code = ("import opd, ctypes.util\n"
            "ctypes.util.find_library = lambda n: None\n"
            "import opd._lib as L\n"
            "L._candidates = (lambda f: lambda: [x for x in f() if x[0] != 'system'])(L._candidates)\n"
            "try:\n    opd.connect()\nexcept opd.LibraryNotFoundError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=30).stdout
    assert "cannot load libopd" in out and "$OPD_LIB" in out and "nope.so" in out
    assert "next to the package" in out and "build tree" in out and "make install" in out


def test_papercuts_of_a_porting_user(c):
    """Python numbers as operands take the tensor's dtype (torch's rule);
    an array given as out= is a clear EINVAL, not a TypeError; a float64
    refusal (an op without float64 kernels) says what the cpu takes and to
    convert; an unknown op's name
    close to a real one gets "did you mean"."""
    x = c.from_numpy(np.arange(4, dtype=np.float32))
    assert c.add(x, 3.0).numpy().tolist() == [3.0, 4.0, 5.0, 6.0]
    assert c.mul(2, x).numpy().tolist() == [0.0, 2.0, 4.0, 6.0]
    assert c.sub(x, 1).numpy().dtype == np.float32
    raises(errors.BadArgumentError, "EINVAL",
           lambda: c.softmax(np.float32(3), out=np.zeros((), np.float32)),
           "an output must be an opd Tensor", "ndarray")
    e = raises(errors.BadArgumentError, "EDTYPE",
               lambda: c.max_pool2d(np.ones((1, 1, 4, 4), np.float64), kernel=[2, 2]),
               "has dtype float64, expected float32 (", "on a cuda device)",
               "convert float64 to float32")
    assert "expected float32 or" not in e.message
    raises(errors.BadArgumentError, "ENOOP", lambda: c.run("sofmax", x),
           'unknown operator "sofmax" (did you mean "softmax"?')
