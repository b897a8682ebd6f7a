"""opd._cuda: maps the daemon's exported device memory here (CUDA VMM).

DESIGN
A device arena the daemon allocated as exportable (opd_alloc_flags with
OPD_ALLOC_EXPORTABLE: cuMemCreate'd memory) is exported by opd_export_cuda
as a POSIX file descriptor passed over the authenticated socket; map()
imports it with the CUDA driver API, loaded from libcuda.so.1 with ctypes
only when first needed (no compiled extension, no link-time dependency):
cuMemImportFromShareableHandle (handle type POSIX_FILE_DESCRIPTOR, the fd
passed as the pointer-sized value), cuMemAddressReserve, cuMemMap and
cuMemSetAccess (read-write for the device). The driver calls run with the
device's primary context pushed (cuDevicePrimaryCtxRetain, retained once
per device for the life of the process): the same context the CUDA
runtime and torch use, so the address is valid in torch, and a thread
that has no current context yet still works.

A Mapping owns (ptr, size, handle, device): the Client caches one per
arena (arena serial -> Mapping) and drops it from the cache when the
arena is released or the connection closes; every torch view holds its
Mapping (through View), so the unmapping (cuMemUnmap, cuMemAddressFree,
cuMemRelease) happens when the last holder is gone, never under a live
view. The imported handle keeps the physical memory alive even after the
daemon frees its side (session closed), so a view outlives its client.
Finalizers do not run at interpreter exit (the process's exit frees it
all), and never in a child after fork() (CUDA is not usable there).

View is the object torch.as_tensor() consumes: __cuda_array_interface__
version 3 (shape, typestr, data=(address, False), strides in bytes or
None, stream None: the daemon's writes are complete when its reply
arrives); torch keeps the View, hence the Mapping and the opd Tensor,
alive for as long as the torch tensor (and its views) live. bfloat16 has
no typestr: it is viewed as int16, then .view(torch.bfloat16).
"""
import ctypes
import threading
import weakref

from . import errors, memory, protocol

_TYPESTR = {"float32": "<f4", "float16": "<f2", "bfloat16": "<i2",
            "float64": "<f8", "int8": "|i1", "uint8": "|u1", "int32": "<i4",
            "int64": "<i8", "bool": "|b1"}

_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
_CU_MEM_LOCATION_TYPE_DEVICE = 1
_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3

CUdeviceptr = ctypes.c_uint64
CUhandle = ctypes.c_uint64      # CUmemGenericAllocationHandle


class CUmemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class CUmemAccessDesc(ctypes.Structure):
    _fields_ = [("location", CUmemLocation), ("flags", ctypes.c_int)]


_cu = None
_ctxs = {}                      # device ordinal -> retained primary CUcontext
_lock = threading.Lock()


def driver():
    """Returns libcuda (loaded once, functions declared). Raises
    BackendError (EBACKEND) if libcuda.so.1 cannot be loaded."""
    global _cu
    if _cu is not None:
        return _cu
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise errors.error(protocol.EBACKEND, "a zero-copy view of daemon "
                           "memory needs the CUDA driver library "
                           "libcuda.so.1, which cannot be loaded here (%s)" % e)
    R, I, U, sz, vp = ctypes.c_int, ctypes.c_int, ctypes.c_ulonglong, \
        ctypes.c_size_t, ctypes.c_void_p
    P = ctypes.POINTER
    sigs = {
        "cuInit": [ctypes.c_uint],
        "cuDeviceGet": [P(I), I],
        "cuDevicePrimaryCtxRetain": [P(vp), I],
        "cuCtxPushCurrent_v2": [vp],
        "cuCtxPopCurrent_v2": [P(vp)],
        "cuGetErrorName": [R, P(ctypes.c_char_p)],
        "cuMemImportFromShareableHandle": [P(CUhandle), vp, I],
        "cuMemAddressReserve": [P(CUdeviceptr), sz, sz, CUdeviceptr, U],
        "cuMemMap": [CUdeviceptr, sz, sz, CUhandle, U],
        "cuMemSetAccess": [CUdeviceptr, sz, P(CUmemAccessDesc), sz],
        "cuMemUnmap": [CUdeviceptr, sz],
        "cuMemAddressFree": [CUdeviceptr, sz],
        "cuMemRelease": [CUhandle],
    }
    try:
        for name, args in sigs.items():
            f = getattr(lib, name)
            f.restype, f.argtypes = R, args
    except AttributeError as e:
        raise errors.error(protocol.EBACKEND, "libcuda.so.1 lacks the CUDA "
                           "VMM calls (%s): the driver is too old for "
                           "zero-copy views" % e)
    _cu = lib
    return lib


def _name(r):
    s = ctypes.c_char_p()
    if _cu is not None and _cu.cuGetErrorName(r, ctypes.byref(s)) == 0 and s.value:
        return "%s (%d)" % (s.value.decode(), r)
    return "CUresult %d" % r


def _primary(dev):
    ctx = _ctxs.get(dev)
    if ctx is not None:
        return ctx
    cu = driver()
    with _lock:
        ctx = _ctxs.get(dev)
        if ctx is not None:
            return ctx
        r = cu.cuInit(0)
        d = ctypes.c_int()
        if r == 0:
            r = cu.cuDeviceGet(ctypes.byref(d), dev)
        c = ctypes.c_void_p()
        if r == 0:
            r = cu.cuDevicePrimaryCtxRetain(ctypes.byref(c), d.value)
        if r != 0:
            raise errors.error(protocol.EBACKEND, "cuda:%d: no CUDA context "
                               "here: %s" % (dev, _name(r)))
        _ctxs[dev] = c.value
        return c.value


class _Current:
    """with _Current(dev): the device's primary context is current."""

    def __init__(self, dev):
        self.ctx = _primary(dev)

    def __enter__(self):
        r = _cu.cuCtxPushCurrent_v2(self.ctx)
        if r != 0:
            raise errors.error(protocol.EBACKEND, "cuCtxPushCurrent: %s"
                               % _name(r))

    def __exit__(self, *exc):
        c = ctypes.c_void_p()
        _cu.cuCtxPopCurrent_v2(ctypes.byref(c))


def _unmap(ptr, size, handle, dev, gen):
    if gen != memory._fork_gen[0] or _cu is None:
        return
    try:
        with _Current(dev):
            _cu.cuMemUnmap(ptr, size)
            _cu.cuMemAddressFree(ptr, size)
            _cu.cuMemRelease(handle)
    except Exception:
        pass


class Mapping:
    """Device memory of the daemon mapped here: .ptr (device address),
    .size, .dev (ordinal), .views (the live View objects). Unmapped when
    the last reference to it goes."""
    __slots__ = ("ptr", "size", "dev", "views", "__weakref__")

    def __init__(self, ptr, size, handle, dev):
        self.ptr, self.size, self.dev = ptr, size, dev
        self.views = weakref.WeakSet()
        fin = weakref.finalize(self, _unmap, ptr, size, handle, dev,
                               memory._fork_gen[0])
        fin.atexit = False

    def __repr__(self):
        return "<opd._cuda.Mapping 0x%x %d bytes on cuda:%d>" % (
            self.ptr, self.size, self.dev)


def map_fd(fd, size, dev):
    """Imports the VMM fd (not closed here) of `size` bytes on device
    ordinal `dev` and maps it read-write; returns a Mapping. Raises
    BackendError (EBACKEND) with the failing call and its CUresult."""
    cu = driver()
    with _Current(dev):
        h = CUhandle()
        ptr = CUdeviceptr()
        step = "cuMemImportFromShareableHandle"
        r = cu.cuMemImportFromShareableHandle(
            ctypes.byref(h), ctypes.c_void_p(fd),
            _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        if r != 0:
            raise errors.error(protocol.EBACKEND, "cuda:%d: %s: %s"
                               % (dev, step, _name(r)))
        ok = 0
        try:
            step = "cuMemAddressReserve"
            r = cu.cuMemAddressReserve(ctypes.byref(ptr), size, 0, 0, 0)
            if r == 0:
                ok = 1
                step = "cuMemMap"
                r = cu.cuMemMap(ptr.value, size, 0, h.value, 0)
            if r == 0:
                ok = 2
                acc = CUmemAccessDesc(CUmemLocation(
                    _CU_MEM_LOCATION_TYPE_DEVICE, dev),
                    _CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
                step = "cuMemSetAccess"
                r = cu.cuMemSetAccess(ptr.value, size, ctypes.byref(acc), 1)
            if r != 0:
                raise errors.error(protocol.EBACKEND, "cuda:%d: %s of %d "
                                   "bytes: %s" % (dev, step, size, _name(r)))
            ok = 3
        finally:
            if ok < 3:
                if ok >= 2:
                    cu.cuMemUnmap(ptr.value, size)
                if ok >= 1:
                    cu.cuMemAddressFree(ptr.value, size)
                cu.cuMemRelease(h.value)
    return Mapping(ptr.value, size, h.value, dev)


class View:
    """What torch.as_tensor() consumes: __cuda_array_interface__ (v3) of a
    tensor in a Mapping; holds the Mapping and the opd Tensor."""
    __slots__ = ("__cuda_array_interface__", "mapping", "tensor",
                 "__weakref__")

    def __init__(self, mapping, t):
        self.mapping, self.tensor = mapping, t
        self.__cuda_array_interface__ = {
            "version": 3, "shape": tuple(t.shape),
            "typestr": _TYPESTR[t.dtype],
            "data": (mapping.ptr + t.offset, False),
            "strides": None if t.is_contiguous() else
            tuple(s * t.itemsize for s in t.strides),
            "stream": None}
        mapping.views.add(self)


def torch_view(mapping, t):
    """Returns a torch CUDA tensor over tensor t's memory in `mapping`
    (no copy; it keeps the mapping and t alive)."""
    import torch
    dev = "cuda:%d" % mapping.dev
    if t.size == 0:
        return torch.empty(t.shape, dtype=getattr(torch, t.dtype), device=dev)
    if t.offset + t._extent() > mapping.size:
        raise errors.error(protocol.EBOUNDS, "tensor bytes [%d, %d) beyond "
                           "the %d mapped" % (t.offset, t.offset + t._extent(),
                                              mapping.size))
    v = torch.as_tensor(View(mapping, t), device=dev)
    if v.data_ptr() != mapping.ptr + t.offset:
        raise errors.error(protocol.EBACKEND, "torch copied the exported "
                           "memory instead of viewing it")
    if t.dtype == "bfloat16":
        v = v.view(torch.bfloat16)
    return v
