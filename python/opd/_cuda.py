"""opd._cuda: maps the daemon's exported device memory here (CUDA VMM).

DESIGN
A device arena the daemon allocated as exportable (opd_alloc_flags with
OPD_ALLOC_EXPORTABLE: cuMemCreate'd memory) is exported by opd_export_cuda
as a POSIX file descriptor passed over the authenticated socket; map_fd()
imports and maps it through libopd's opd_cuda_map_export, which does the
driver's work (cuMemImportFromShareableHandle, cuMemAddressReserve,
cuMemMap, cuMemSetAccess read-write for the device) with the device's
primary context pushed: the same context the CUDA runtime and torch use,
so the address is valid in torch, and a thread that has no current
context yet still works. libopd is the one loader of the CUDA driver in
opd's clients (client/libopd/cuda.c): this module loads no driver itself,
and imports without one.

A Mapping owns (ptr, size, handle, device): the Client caches one per
arena (arena serial -> Mapping) and drops it from the cache when the
arena is released or the connection closes; every torch view holds its
Mapping (through View), so the unmapping (opd_cuda_unmap: cuMemUnmap,
cuMemAddressFree, cuMemRelease) happens when the last holder is gone,
never under a live view. The imported handle keeps the physical memory
alive even after the daemon frees its side (session closed), so a view
outlives its client. Finalizers do not run at interpreter exit (the
process's exit frees it all), and never in a child after fork() (CUDA is
not usable there).

View is the object torch.as_tensor() consumes: __cuda_array_interface__
version 3 (shape, typestr, data=(address, False), strides in bytes or
None, stream None: the daemon's writes are complete when its reply
arrives); torch keeps the View, hence the Mapping and the opd Tensor,
alive for as long as the torch tensor (and its views) live. bfloat16 has
no typestr: it is viewed as int16, then .view(torch.bfloat16).
"""
import ctypes
import weakref

from . import _lib, errors, memory, protocol
from .errors import check

_TYPESTR = {"float32": "<f4", "float16": "<f2", "bfloat16": "<i2",
            "float64": "<f8", "int8": "|i1", "uint8": "|u1", "int32": "<i4",
            "int64": "<i8", "bool": "|b1"}


def _driver():
    """libopd with opd_cuda_map_export and opd_cuda_unmap. Raises
    BackendError (EBACKEND) when the library predates them."""
    lib = _lib.load()
    if getattr(lib, "opd_cuda_map_export", None) is None or \
            getattr(lib, "opd_cuda_unmap", None) is None:
        raise errors.error(protocol.EBACKEND, "a zero-copy view of daemon "
                           "memory needs libopd's opd_cuda_map_export "
                           "(libopd at %s predates it)" % _lib.path)
    return lib


def _unmap(ptr, size, handle, dev, gen):
    if gen != memory._fork_gen[0]:
        return
    try:
        _driver().opd_cuda_unmap(ptr, size, handle, dev)
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
    lib = _driver()
    ptr, handle = ctypes.c_uint64(), ctypes.c_uint64()
    check(lib.opd_cuda_map_export(fd, size, dev, ctypes.byref(ptr),
                                  ctypes.byref(handle)))
    return Mapping(ptr.value, size, handle.value, dev)


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
