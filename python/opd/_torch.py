"""opd._torch: torch interop of a connection (a part of opd.Client).

DESIGN
Everything that knows torch lives here, and torch is imported lazily
(only when a torch tensor is in hand), so the package works without it.
TorchInterop, held by its Client as `_torch`, owns `imports` (torch
storages imported by IPC handle, an LRU) and `maps` (device arenas mapped
here for zero-copy torch views); it reaches the connection through its
Client (handle, lock, lib) and arena ids through the Arenas part, which
tells it (unmap) when an arena id is released.

torch CUDA tensors given as inputs or outputs are used in place. In a
run (Client.run) they are described by libopd's opd_tensor_cuda or, for
from_torch (an opd Tensor to keep), imported by their legacy CUDA IPC
handle (opd_import_cuda), once per storage and connection (an LRU of
IMPORT_CACHE storages, each held alive while cached). Runs that touch
torch's memory are ORDERED WITH torch's current stream (run_ordered,
libopd's opd_run_stream): the daemon's stream waits on the GPU for what
torch queued before, torch's later work waits on the GPU for the run,
and the call returns once the run is enqueued; no torch.cuda.synchronize.
A libopd without opd_run_stream falls back to synchronizing torch's
device first (sync_device, when Client.sync_torch) and a run that
returns when done. The other direction: the per-device arenas are
allocated exportable (opd_alloc_flags, CUDA VMM; plain opd_alloc when
the daemon has no VMM), and Tensor.torch() of a device tensor maps its
arena here once (opd_export_cuda's fd, see _cuda.py; maps: arena serial
-> Mapping, dropped when the arena is released or the client closes,
unmapped when the last torch view is gone too) and returns a torch view;
runs touching a tensor of an arena with live torch views are ordered
with torch too (_runner.py).

torch CPU tensors reach the daemon with no copy when their bytes already
lie in shared memory the daemon can map: an opd arena (a view of an opd
Tensor: opd.torch.empty, an earlier op's output), or a storage torch put
in a POSIX shm file (share_memory_(), either sharing strategy). shm_file
finds such a storage's file (its mapping in /proc/self/maps: the address
of the file's byte 0 and the storage's offset in it; the fd torch keeps
for the file_descriptor strategy, the file opened from /dev/shm for
file_system) and shared_storage registers it with the connection once
(Arenas.register_shm: cached per storage, released when the storage
dies). Any other CPU tensor is copied into shared memory (staging) and
counted (Arenas.note_staging: STATS "staging").
"""
import collections
import ctypes
import os
import weakref

from . import _cuda, errors, protocol
from .errors import check
from .tensor import Tensor, device_name, dtype_name

IMPORT_CACHE = 32        # torch storages imported per connection (LRU)
# export failures meaning "this daemon/arena cannot export": copy instead
_NO_EXPORT = (protocol.EINVAL, protocol.EPROTO, protocol.EVERSION,
              protocol.EBACKEND, protocol.EREADONLY)


def _is_torch(x):
    return type(x).__module__.startswith("torch") and hasattr(x, "is_cuda")


def _ipc_handle(handle):
    """Returns the 64-byte cudaIpcMemHandle_t in `handle`: raw, or torch's
    versioned form (version byte, b"c", the 64 bytes)."""
    handle = bytes(handle)
    if len(handle) == 64:
        return handle
    if len(handle) == 66 and handle[1:2] == b"c":
        return handle[2:]
    if len(handle) > 1 and handle[1:2] == b"e":
        raise errors.error(protocol.EINVAL, "this torch CUDA memory is an "
                           "expandable segment, which has no legacy IPC "
                           "handle; run with PYTORCH_CUDA_ALLOC_CONF="
                           "expandable_segments:False")
    raise errors.error(protocol.EINVAL, "a CUDA IPC handle of %d bytes: "
                       "expected the 64 bytes of a cudaIpcMemHandle_t"
                       % len(handle))


def _mapping(p):
    """(start, file offset, (major, minor), inode, path) of the shared
    mapping of this process holding address p, or None."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            a, b = parts[0].split("-")
            if int(a, 16) <= p < int(b, 16):
                if len(parts) < 6 or parts[1][:2] != "rw" or parts[1][3] != "s":
                    return None
                mj, mn = parts[3].split(":")
                return (int(a, 16), int(parts[2], 16), (int(mj, 16), int(mn, 16)),
                        int(parts[4]), parts[5].rstrip("\n"))
    return None


_kept = []


def _storages_kept():
    """True when torch keeps one Python object per CPU storage for as long
    as the storage lives (torch >= 2: the object a finalizer can watch);
    an older torch's shared tensors are copied."""
    if not _kept:
        import torch
        ok = hasattr(torch.Tensor, "untyped_storage")
        if ok:
            t = torch.empty(1)
            ok = t.untyped_storage() is t.untyped_storage()
        _kept.append(ok)
    return _kept[0]


def shm_file(st):
    """(fd, owned, file size, address of byte 0 here, the storage's offset
    in the file) of torch CPU storage st's POSIX shm file (share_memory_),
    or None where st is not one; owned: the caller closes fd."""
    p = st.data_ptr()
    m = _mapping(p)
    if m is None:
        return None
    start, foff, (mj, mn), ino, path = m
    deleted = path.endswith(" (deleted)")
    fd, owned = -1, False
    try:
        if not deleted and path.startswith("/dev/shm/"):
            fd, owned = os.open(path, os.O_RDWR | os.O_CLOEXEC), True
        elif deleted and hasattr(st, "_share_fd_cpu_"):
            fd = int(st._share_fd_cpu_()[0])  # the fd torch keeps for it
            if st.data_ptr() != p:             # torch moved it: not ours
                return None
        else:
            return None
        sb = os.fstat(fd)
    except (OSError, RuntimeError):
        if owned:
            os.close(fd)
        return None
    if sb.st_ino != ino or (os.major(sb.st_dev), os.minor(sb.st_dev)) != (mj, mn):
        if owned:
            os.close(fd)
        return None
    base = start - foff
    return fd, owned, sb.st_size, base, p - base


def sync_device(device):
    """torch.cuda.synchronize(device): the work torch queued on it is done
    before opd (another process, its own stream) touches its memory. The
    fallback of a libopd without stream-ordered runs."""
    import torch
    torch.cuda.synchronize(device)


_raw_stream = None


def current_stream(index):
    """The cudaStream_t (an int) of torch's current stream on cuda:index."""
    global _raw_stream
    f = _raw_stream
    if f is None:
        import torch
        f = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if f is None:
            def f(i):
                return torch.cuda.current_stream(i).cuda_stream
        _raw_stream = f
    return f(index)


class TorchInterop:
    """A connection's torch interop: from_torch, import_cuda,
    forget_imports, torch_views, and the zero-copy torch views behind
    Tensor.torch()."""

    def __init__(self, client, arenas):
        self._c, self._arenas = client, arenas
        self.imports = collections.OrderedDict()  # torch storage -> arena
        self.maps = {}                 # arena serial -> _cuda.Mapping (views)

    def reset(self):
        """Forgets the imports and mappings of the previous connection
        (live torch views keep their mapping)."""
        self.imports = collections.OrderedDict()
        self.maps = {}

    def unmap(self, serial):
        """Arena `serial` was released: its mapping goes with its last view."""
        self.maps.pop(serial, None)

    def viewed(self, t):
        """True when tensor t's arena has live torch views here."""
        m = self.maps.get(t.arena.serial)
        return m is not None and len(m.views) > 0

    def shared_storage(self, st):
        """The ShmArena of torch CPU storage st's shm file, registered with
        this connection once (cached until st dies), or None where st is
        not in one the daemon maps."""
        shm = self._arenas.shm
        key = (st.data_ptr(), st.nbytes())
        a = shm.get(key)
        if a is None:
            if not st.is_shared():
                return None
            with self._c._lock:
                a = shm.get(key)
                if a is None:
                    f = shm_file(st)
                    if f is None:
                        shm[key] = a = False
                        fin = weakref.finalize(st, shm.pop, key, None)
                        fin.atexit = False
                    else:
                        fd, owned, size, base, data = f
                        try:
                            a = self._arenas.register_shm(key, st, fd, size,
                                                          base, data)
                        finally:
                            if owned:
                                os.close(fd)
        return a or None

    def cpu_location(self, t):
        """(arena, offset) when contiguous torch CPU tensor t lies in
        shared memory the daemon maps (an arena of this connection's host
        Allocator, or a registered shm file), else None."""
        if not t.is_contiguous():
            return None
        alloc = self._c._alloc
        p = t.data_ptr()
        if alloc is not None:
            n = t.numel() * t.element_size()
            for s in alloc._states:
                a = s.arena
                if a.base <= p and p + n <= a.base + a.size:
                    return a, p - a.base
        if not _storages_kept():
            return None
        st = t.untyped_storage()
        a = self.shared_storage(st)
        if a is None:
            return None
        return a, a.data + (p - st.data_ptr())

    def from_torch(self, x):
        """Returns a Tensor for torch tensor x. A CUDA tensor is used in
        place, with no copy: its storage is imported into this connection
        by CUDA IPC handle (once per storage; the storage is kept alive
        while cached, see forget_imports), so outputs the daemon writes
        into it are visible in torch. A CPU tensor is copied into shared
        memory (torch.from_dlpack(t) of an opd Tensor is the zero-copy way
        round). Raises BadArgumentError for an unsupported dtype or a
        handle that does not open. A contiguous CPU tensor already in
        shared memory (an opd arena, share_memory_()) is used in place too
        (cpu_location); any other CPU tensor is copied (and counted as
        staging)."""
        if not _is_torch(x):
            raise errors.error(protocol.EINVAL, "from_torch: %r is not a torch "
                               "tensor" % type(x).__name__)
        if x.is_cuda:
            return self.from_torch_cuda(x)
        x = x.detach()
        dt = dtype_name(x.dtype)
        if x.numel() and x.dim() <= protocol.MAX_RANK:
            loc = self.cpu_location(x)
            if loc is not None:
                return Tensor(loc[0], loc[1], dt, tuple(x.shape), None, x)
        t = self._c.empty(tuple(x.shape), dt)
        if t.size:
            t.torch().copy_(x)
            self._arenas.note_staging(t.nbytes)
        return t


    def from_torch_cuda(self, x):
        if x.dim() > protocol.MAX_RANK:
            raise errors.error(protocol.ELIMIT, "rank %d out of 0..%d"
                               % (x.dim(), protocol.MAX_RANK))
        dt = dtype_name(x.dtype)
        idx = x.device.index
        if idx is None:
            import torch
            idx = torch.cuda.current_device()
        dev = "cuda:%d" % idx
        st = x.untyped_storage()
        if st.nbytes() == 0 or x.numel() == 0:
            return self._c.empty(tuple(x.shape), dt, device=dev)
        key = (idx, st.data_ptr(), st.nbytes())
        a = self.imports.get(key)
        if a is None:
            a = self._import_storage(st, dev, key, self.wire_device(idx))
        else:
            try:
                self.imports.move_to_end(key)
            except KeyError:
                pass
        strides = None if x.is_contiguous() else tuple(x.stride())
        return Tensor(a, x.storage_offset() * x.element_size(), dt,
                      tuple(x.shape), strides, a)

    def wire_device(self, idx):
        """The name the daemon is sent for this process's CUDA device idx
        (torch's index): its UUID ("GPU-..."), so that a daemon whose
        CUDA_VISIBLE_DEVICES differs from this process's opens the memory on
        the right GPU; "cuda:idx" where libopd cannot tell."""
        fn = getattr(self._c._lib, "opd_cuda_device_name", None)
        if fn is not None:
            buf = ctypes.create_string_buffer(48)
            if fn(idx, buf, 48) == 0:
                return buf.value.decode()
        return "cuda:%d" % idx

    def _import_storage(self, st, dev, key, wire=None):
        c = self._c
        h = c._handle()
        fn = c._need("opd_import_cuda")
        try:
            info = st._share_cuda_()
        except RuntimeError as e:
            raise errors.error(protocol.EINVAL, "torch cannot share this CUDA "
                               "storage by IPC handle (%s); clone it first" % e)
        raw = _ipc_handle(info[1])
        size, offset = int(info[2]), int(info[3])
        try:
            # nobody in torch will decrement the count _share_cuda_ set for
            # its consumer; without this the storage would never be freed
            type(st)._release_ipc_counter_cuda(info[4], info[5])
        except Exception:
            pass
        with c._lock:
            a = self.imports.get(key)
            if a is not None:
                return a
            aid = ctypes.c_uint64()
            wb = (wire or dev).encode()
            rc = fn(h, raw, 64, offset, size, wb, ctypes.byref(aid))
            if rc == protocol.ELIMIT and self.imports:
                self.imports.clear()             # arena ids back, try again
                self._arenas.drain(h)
                rc = fn(h, raw, 64, offset, size, wb, ctypes.byref(aid))
            check(rc)
            a = self._arenas.remote(aid.value, size, dev, "import", keep=st)
            self.imports[key] = a
            while len(self.imports) > IMPORT_CACHE:
                self.imports.popitem(last=False)
            return a

    # ---- runs on torch's memory, in torch's stream order ---------------------
    def run_ordered(self, h, devb, index, ob, in_arr, n_in, out_arr, n_out,
                    attr_arr, n_attrs):
        """Runs in order with torch's current stream of cuda:index and
        returns libopd's code (see DESIGN)."""
        c = self._c
        fn = getattr(c._lib, "opd_run_stream", None)
        if fn is not None:
            return fn(h, devb, current_stream(index), ob, in_arr, n_in,
                      out_arr, n_out, attr_arr, n_attrs)
        if c.sync_torch:
            sync_device(index)
        return c._lib.opd_run_on(h, devb, ob, in_arr, n_in, out_arr, n_out,
                                 attr_arr, n_attrs)

    def import_cuda(self, handle, offset, size, device="cuda:0"):
        """Imports bytes [offset, offset+size) of another allocation of this
        process's own CUDA memory by its IPC handle (64 bytes, or torch's
        66-byte form) and returns them as a writable uint8 Tensor of shape
        (size,) on `device`. The low-level path under from_torch. Raises
        BadArgumentError: EINVAL (the handle does not open), EBOUNDS (the
        range exceeds the allocation); BackendError (EDEVICE)."""
        c = self._c
        h = c._handle()
        dev = device_name(device)
        aid = ctypes.c_uint64()
        check(c._need("opd_import_cuda")(h, _ipc_handle(handle), 64, offset,
                                         size, dev.encode(), ctypes.byref(aid)))
        a = self._arenas.remote(aid.value, size, dev, "import")
        return Tensor(a, 0, "uint8", (size,), None, a)

    def forget_imports(self):
        """Drops the cache of imported torch storages: their arena ids are
        released and torch may free the memory. Returns None."""
        c = self._c
        with c._lock:
            self.imports.clear()
        if c._h is not None:
            h = c._handle()
            fn = getattr(c._lib, "opd_cuda_forget", None)
            if fn is not None:
                check(fn(h))

    # ---- zero-copy torch views of device tensors -----------------------------
    def torch_view(self, t):
        """Returns a zero-copy torch CUDA tensor over device tensor t (of
        this connection), or None if its arena cannot be exported (not
        allocated exportable, or the daemon or libopd cannot export)."""
        a = t.arena
        if not getattr(a, "exportable", False):
            return None
        m = self.maps.get(a.serial)
        if m is None:
            m = self._map_arena(a)
            if m is None:
                return None
        return _cuda.torch_view(m, t)

    def _map_arena(self, a):
        import torch
        torch.cuda.init()
        dev = int(a.device[5:])
        c = self._c
        with c._lock:
            m = self.maps.get(a.serial)
            if m is not None:
                return m
            h = c._handle()
            aid = self._arenas.arena_id(a)
            fn = getattr(c._lib, "opd_export_cuda", None)
            if fn is None:
                a.exportable = False
                return None
            fd, size = ctypes.c_int(-1), ctypes.c_uint64()
            rc = fn(h, aid, ctypes.byref(fd), ctypes.byref(size))
            if rc in _NO_EXPORT:
                a.exportable = False
                return None
            check(rc)
            try:
                m = _cuda.map_fd(fd.value, size.value, dev)
            finally:
                os.close(fd.value)
            self.maps[a.serial] = m
            return m

    def torch_views(self):
        """Returns the number of device arenas of this connection mapped
        here for zero-copy torch views (Tensor.torch)."""
        return len(self.maps)

