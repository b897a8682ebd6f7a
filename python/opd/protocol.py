"""opd.protocol: the protocol's tables (error codes, dtypes, attribute types).

DESIGN
These mirror the X-macro lists of include/opd/protocol.h (OPD_ERRNO_MAP,
OPD_DTYPE_MAP, OPD_ATTR_TYPE_MAP) row for row, so the package needs no
header at run time. tests/python/test_protocol.py parses the header and
checks every row here against it, and against the names libopd itself
reports (opd_errname, opd_dtype_name), so a change on either side fails the
tests instead of drifting silently.
"""

PROTOCOL_VERSION = 1
MAX_RANK = 8        # OPD_MAX_RANK
MAX_TENSORS = 16    # OPD_MAX_TENSORS
MAX_ATTRS = 16      # OPD_MAX_ATTRS
MAX_NAME = 64       # OPD_MAX_NAME

# OPD_ERRNO_MAP: (name, value, default message)
ERRORS = (
    ("EINVAL", -1, "invalid argument"),
    ("EPROTO", -2, "malformed message"),
    ("EVERSION", -3, "protocol version mismatch"),
    ("ESTATE", -4, "request not valid in this state"),
    ("ENOOP", -5, "unknown operator"),
    ("EARITY", -6, "wrong number of tensors"),
    ("EDTYPE", -7, "unsupported dtype"),
    ("ESHAPE", -8, "shapes do not fit the operator"),
    ("ELAYOUT", -9, "unsupported tensor layout"),
    ("EBOUNDS", -10, "tensor extends outside its arena"),
    ("EOVERFLOW", -11, "size computation overflows"),
    ("EARENA", -12, "unknown arena"),
    ("EFD", -13, "file descriptor is not a sealed memfd"),
    ("EATTR", -14, "bad attribute"),
    ("ELIMIT", -15, "limit exceeded"),
    ("ENOMEM", -16, "out of memory"),
    ("ETOOBIG", -17, "frame larger than the limit"),
    ("ECONNECT", -18, "cannot connect to the daemon"),
    ("ECLOSED", -19, "connection closed"),
    ("ESHUTDOWN", -20, "daemon is shutting down"),
    ("EIO", -21, "I/O error"),
    ("EDEVICE", -22, "no such device"),
    ("EBACKEND", -23, "backend failure"),
    ("ETIMEDOUT", -24, "timed out"),
    ("EINTERNAL", -25, "internal error"),
    ("EALIAS", -26, "output overlaps an input"),
    ("EREADONLY", -27, "tensor is read-only"),
    ("ENOENT", -28, "no tensor is published under that name"),
    ("EPERM", -29, "permission denied"),
)

# OPD_DTYPE_MAP: (name, value, size in bytes)
DTYPES = (
    ("float32", 1, 4),
    ("float16", 2, 2),
    ("bfloat16", 3, 2),
    ("float64", 4, 8),
    ("int8", 5, 1),
    ("uint8", 6, 1),
    ("int32", 7, 4),
    ("int64", 8, 8),
    ("bool", 9, 1),
)

# OPD_ATTR_TYPE_MAP: (name, value)
ATTR_TYPES = (
    ("int", 1),
    ("float", 2),
    ("bool", 3),
    ("str", 4),
    ("ints", 5),
)

ERROR_NAMES = {v: n for n, v, _ in ERRORS}        # -7 -> "EDTYPE"
ERROR_CODES = {n: v for n, v, _ in ERRORS}        # "EDTYPE" -> -7
ERROR_MESSAGES = {v: m for _, v, m in ERRORS}     # -7 -> "unsupported dtype"
DTYPE_CODES = {n: v for n, v, _ in DTYPES}        # "float32" -> 1
DTYPE_NAMES = {v: n for n, v, _ in DTYPES}        # 1 -> "float32"
DTYPE_SIZES = {n: s for n, _, s in DTYPES}        # "float32" -> 4
ATTR_TYPE_CODES = {n: v for n, v in ATTR_TYPES}   # "ints" -> 5

globals().update({n: v for n, v, _ in ERRORS})    # protocol.EDTYPE == -7
