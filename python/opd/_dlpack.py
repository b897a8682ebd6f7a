"""opd._dlpack: DLPack capsules built with ctypes (no compiled extension).

DESIGN
to_capsule(t) allocates a DLManagedTensor (DLPack 0.x layout, the one
np.from_dlpack and torch.from_dlpack accept unversioned) whose data
pointer is the tensor's own address (arena base + offset) with
byte_offset 0, and whose shape/strides arrays live in the same ctypes
allocation. byte_offset stays 0 because consumers disagree on it: numpy
adds it to data, some torch versions (Debian's 1.13 among them) ignore
it and would view, and write, the arena's start instead. The Python side
(ctypes objects + the Tensor) is kept in _live, keyed by the struct's
address, until the consumer calls the deleter; if the capsule dies unused
(still named "dltensor"), its destructor calls the deleter itself. Both
callbacks are module-level CFUNCTYPE objects, so they outlive every
capsule; ctypes callbacks take the GIL, so a consumer may call the deleter
from any thread.
"""
import ctypes

_DL_FLOAT, _DL_INT, _DL_UINT, _DL_BFLOAT, _DL_BOOL = 2, 0, 1, 4, 6
_CODES = {"float32": (_DL_FLOAT, 32), "float16": (_DL_FLOAT, 16),
          "bfloat16": (_DL_BFLOAT, 16), "float64": (_DL_FLOAT, 64),
          "int8": (_DL_INT, 8), "uint8": (_DL_UINT, 8),
          "int32": (_DL_INT, 32), "int64": (_DL_INT, 64),
          "bool": (_DL_BOOL, 8)}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
DLManagedTensor._fields_ = [("dl_tensor", DLTensor),
                            ("manager_ctx", ctypes.c_void_p),
                            ("deleter", _Deleter)]

_live = {}   # address of the DLManagedTensor -> (struct, shape, strides, tensor)
_NAME = b"dltensor"

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


@_Deleter
def _deleter(addr):
    _live.pop(addr, None)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule):
    # consumed capsules are renamed "used_dltensor": their consumer deletes
    if _api.PyCapsule_IsValid(capsule, _NAME):
        _live.pop(_api.PyCapsule_GetPointer(capsule, _NAME), None)


_DESTRUCTOR = ctypes.cast(_capsule_destructor, ctypes.c_void_p).value


def to_capsule(t):
    """Returns a "dltensor" PyCapsule viewing tensor t (kDLCPU)."""
    n = len(t.shape)
    shape = (ctypes.c_int64 * max(n, 1))(*t.shape)
    strides = (ctypes.c_int64 * max(n, 1))(*t.strides)
    m = DLManagedTensor()
    code, bits = _CODES[t.dtype]
    m.dl_tensor.data = t.arena.base + t.offset     # see DESIGN: not byte_offset
    m.dl_tensor.device = DLDevice(1, 0)
    m.dl_tensor.ndim = n
    m.dl_tensor.dtype = DLDataType(code, bits, 1)
    m.dl_tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    m.dl_tensor.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    m.dl_tensor.byte_offset = 0
    m.manager_ctx = None
    m.deleter = _deleter
    addr = ctypes.addressof(m)
    _live[addr] = (m, shape, strides, t)
    return _api.PyCapsule_New(addr, _NAME, _DESTRUCTOR)
