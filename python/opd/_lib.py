"""opd._lib: finds libopd and declares its C ABI for ctypes.

DESIGN
libopd is loaded once per process, from the first of these that exists:
$OPD_LIB (a file path); next to the package (opd/libopd.so, then
opd/lib/libopd.so: where a wheel or `make install-python` puts it); the
build tree the package sits in (<repo>/build/libopd.so, found from this
file's location, so `PYTHONPATH=python` in a checkout just works); then
the system (ctypes.util.find_library("opd"), /usr/local/lib/libopd.so.0,
where `make install` puts it). If none loads, OSError-derived
LibraryNotFoundError lists every place tried and why each failed.

Every function gets argtypes and restype so ctypes checks arguments and
never truncates pointers. The CUDA-era entry points (opd_alloc,
opd_run_on, opd_publish, opd_publish2, opd_attach, opd_import_cuda, opd_alloc_flags,
opd_export_cuda, ...) and the graph API (opd_graph_*) are
declared when present, so an older libopd still loads for host-only use. The struct layouts mirror opd.h's opd_tensor_t
and opd_attr_t (160 and 104 bytes; a test checks the sizes).
"""
import ctypes
import ctypes.util
import os

from . import protocol

MAX_RANK = protocol.MAX_RANK


class TensorDesc(ctypes.Structure):
    """opd_tensor_t: one tensor descriptor (arena id, byte offset, dtype,
    shape, strides in elements, strided flag)."""
    _fields_ = [
        ("arena", ctypes.c_uint64),
        ("offset", ctypes.c_uint64),
        ("dtype", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_RANK),
        ("strides", ctypes.c_int64 * MAX_RANK),
        ("strided", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
    ]


class AttrDesc(ctypes.Structure):
    """opd_attr_t: one operator attribute; `type` says which field is read."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("type", ctypes.c_int32),
        ("n", ctypes.c_int32),
        ("i", ctypes.c_int64),
        ("f", ctypes.c_double),
        ("s", ctypes.c_char_p),
        ("ints", ctypes.c_int64 * MAX_RANK),
    ]


class LibraryNotFoundError(OSError):
    """libopd could not be loaded from any of the places the package looks."""


def _candidates():
    """Returns [(description, path or None)] in lookup order."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    env = os.environ.get("OPD_LIB")
    if env:
        out.append(("$OPD_LIB", env))
    out.append(("next to the package", os.path.join(here, "libopd.so")))
    out.append(("next to the package", os.path.join(here, "lib", "libopd.so")))
    repo = os.path.dirname(os.path.dirname(here))
    out.append(("build tree", os.path.join(repo, "build", "libopd.so")))
    found = ctypes.util.find_library("opd")
    out.append(("system (find_library)", found))
    out.append(("system", "/usr/local/lib/libopd.so.0"))
    return out


def _declare(lib):
    c_int, c_uint32, c_uint64 = ctypes.c_int, ctypes.c_uint32, ctypes.c_uint64
    vp, cp, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
    T, A = ctypes.POINTER(TensorDesc), ctypes.POINTER(AttrDesc)
    P = ctypes.POINTER
    sigs = {
        "opd_connect": (c_int, [cp, P(vp)]),
        "opd_close": (None, [vp]),
        "opd_server_info": (c_int, [vp, P(vp), P(sz)]),
        "opd_socket_path": (c_int, [cp, cp, sz]),
        "opd_arena_create": (c_int, [vp, c_uint64, P(c_uint64), P(vp)]),
        "opd_arena_release": (c_int, [vp, c_uint64]),
        "opd_arena_fd": (c_int, [vp, c_uint64, P(c_int)]),
        "opd_arena_register_fd": (c_int, [vp, c_int, c_uint64, P(c_uint64)]),
        "opd_run": (c_int, [vp, cp, T, c_uint32, T, c_uint32, A, c_uint32]),
        "opd_submit": (c_int, [vp, cp, T, c_uint32, T, c_uint32, A, c_uint32,
                               P(c_uint64)]),
        "opd_wait": (c_int, [vp, c_uint64, c_int]),
        "opd_infer": (c_int, [vp, cp, T, c_uint32, A, c_uint32, T, c_uint32,
                              P(c_uint32)]),
        "opd_ping": (c_int, [vp]),
        "opd_ops_json": (c_int, [vp, P(vp), P(sz)]),
        "opd_stats_json": (c_int, [vp, P(vp), P(sz)]),
        "opd_free": (None, [vp]),
        "opd_last_error": (cp, []),
        "opd_strerror": (cp, [c_int]),
        "opd_errname": (cp, [c_int]),
        "opd_dtype_name": (cp, [ctypes.c_int32]),
        "opd_dtype_size": (ctypes.c_int32, [ctypes.c_int32]),
        "opd_dtype_from_name": (ctypes.c_int32, [cp]),
        "opd_version": (cp, []),
    }
    # the CUDA-era API: declared when the library has it (an older libopd
    # still loads; the features that need it raise BackendError)
    optional = {
        "opd_plugins_json": (c_int, [vp, P(vp), P(sz)]),
        "opd_connect_flags": (c_int, [cp, c_uint32, P(vp)]),
        "opd_alloc": (c_int, [vp, cp, c_uint64, P(c_uint64)]),
        "opd_alloc_flags": (c_int, [vp, cp, c_uint64, c_uint32, P(c_uint64)]),
        "opd_export_cuda": (c_int, [vp, c_uint64, P(c_int), P(c_uint64)]),
        "opd_publish": (c_int, [vp, c_uint64, cp, cp]),
        "opd_publish2": (c_int, [vp, c_uint64, cp, cp, P(cp), c_int]),
        "opd_unpublish": (c_int, [vp, cp]),
        "opd_attach": (c_int, [vp, cp, P(c_uint64), P(c_uint64), cp, sz,
                               cp, sz]),
        "opd_import_cuda": (c_int, [vp, cp, sz, c_uint64, c_uint64, cp,
                                    P(c_uint64)]),
        "opd_run_on": (c_int, [vp, cp, cp, T, c_uint32, T, c_uint32, A,
                               c_uint32]),
        "opd_submit_on": (c_int, [vp, cp, cp, T, c_uint32, T, c_uint32, A,
                                  c_uint32, P(c_uint64)]),
        "opd_prepare": (c_int, [vp, cp, cp, T, c_uint32, T, c_uint32, A,
                                c_uint32, P(vp)]),
        "opd_run_prepared": (c_int, [vp, vp]),
        "opd_submit_prepared": (c_int, [vp, vp, P(c_uint64)]),
        "opd_prepared_free": (None, [vp]),
        # asynchronous and stream-ordered runs (docs/async.md)
        "opd_run_async": (c_int, [vp, cp, cp, T, c_uint32, T, c_uint32, A,
                                  c_uint32]),
        "opd_submit_async": (c_int, [vp, cp, cp, T, c_uint32, T, c_uint32, A,
                                     c_uint32, P(c_uint64)]),
        "opd_run_stream": (c_int, [vp, cp, vp, cp, T, c_uint32, T, c_uint32,
                                   A, c_uint32]),
        "opd_synchronize": (c_int, [vp]),
        "opd_run_stream_ptrs": (c_int, [vp, cp, vp, cp, P(vp), T, c_uint32,
                                        c_uint32, A, c_uint32]),
        "opd_prepare_flags": (c_int, [vp, cp, cp, T, c_uint32, T, c_uint32, A,
                                      c_uint32, c_uint32, P(vp)]),
        "opd_run_prepared_stream": (c_int, [vp, vp, vp]),
        "opd_tensor_cuda": (c_int, [vp, cp, vp, T]),
        "opd_cuda_forget": (c_int, [vp]),
        "opd_transport": (cp, [vp]),
        "opd_transport_why": (cp, [vp]),
        "opd_cuda_device_name": (c_int, [c_int, cp, sz]),
        # the daemon's exported device arenas mapped here (opd._cuda)
        "opd_cuda_map_export": (c_int, [c_int, c_uint64, c_int, P(c_uint64),
                                        P(c_uint64)]),
        "opd_cuda_unmap": (c_int, [c_uint64, c_uint64, c_uint64, c_int]),
        # libopd's C kernels for torch's dispatcher (opd.torch)
        "opd_torch_available": (c_int, [cp, sz]),
        "opd_torch_kernel": (c_int, [cp, cp, c_int, c_uint32, c_uint32,
                                     c_uint32, c_uint32, P(cp), P(ctypes.c_int32)]),
        "opd_torch_bind": (None, [vp, vp]),
        "opd_batch_begin": (c_int, [vp, vp]),
        "opd_batch_end": (c_int, [vp]),
        "opd_torch_unbind": (None, [vp]),
        "opd_torch_cpu_kernels": (c_int, [cp, c_int, vp]),
        # where a pointer lies: arenas noted for torch's CPU kernel
        "opd_arena_note": (c_int, [vp, c_uint64, vp, c_uint64]),
        "opd_arena_find": (c_int, [vp, vp, c_uint64, P(c_uint64), P(c_uint64)]),
        # graphs: a definition built here, defined, run, destroyed (opd._graph)
        "opd_graph_def_new": (vp, []),
        "opd_graph_def_free": (None, [vp]),
        "opd_graph_input": (c_int, [vp, cp, ctypes.c_int32, ctypes.c_int32,
                                    P(ctypes.c_int64)]),
        "opd_graph_const": (c_int, [vp, cp, T]),
        "opd_graph_node": (c_int, [vp, cp, P(c_int), c_uint32, A, c_uint32,
                                   c_uint32]),
        "opd_graph_output": (c_int, [vp, c_int]),
        "opd_graph_def_class": (c_int, [vp, cp]),
        "opd_graph_define": (c_int, [vp, cp, vp, P(c_uint64)]),
        "opd_graph_def_outputs": (c_int, [vp, T, c_uint32, P(c_uint32)]),
        "opd_graph_def_temp_bytes": (c_int, [vp, P(c_uint64)]),
        "opd_graph_run": (c_int, [vp, c_uint64, T, c_uint32, T, c_uint32]),
        "opd_graph_submit": (c_int, [vp, c_uint64, T, c_uint32, T, c_uint32,
                                     c_uint32, P(c_uint64)]),
        "opd_graph_prepare": (c_int, [vp, c_uint64, T, c_uint32, T, c_uint32,
                                      c_uint32, P(vp)]),
        "opd_graph_destroy": (c_int, [vp, c_uint64]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    for name, (res, args) in optional.items():
        f = getattr(lib, name, None)
        if f is not None:
            f.restype, f.argtypes = res, args


def load():
    """Loads libopd (once). Returns the ctypes.CDLL.
    Raises LibraryNotFoundError naming every place tried."""
    global _lib, path
    if _lib is not None:
        return _lib
    tried = []
    for what, p in _candidates():
        if not p:
            tried.append("%s: not found" % what)
            continue
        if os.sep in p and not os.path.exists(p):
            tried.append("%s: %s (no such file)" % (what, p))
            continue
        try:
            lib = ctypes.CDLL(p)
            _declare(lib)
        except (OSError, AttributeError) as e:
            tried.append("%s: %s (%s)" % (what, p, e))
            continue
        _lib, path = lib, p
        return lib
    raise LibraryNotFoundError(
        "opd: cannot load libopd; build it with `make` (build/libopd.so), "
        "install it with `make install`, or set OPD_LIB to its path. "
        "Tried: " + "; ".join(tried))


_lib = None
path = None   # the file libopd was loaded from


def take_string(ptr, n):
    """Copies n bytes at ptr (allocated by libopd), frees them, returns str."""
    try:
        return ctypes.string_at(ptr.value, n.value).decode()
    finally:
        _lib.opd_free(ptr)
