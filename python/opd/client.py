"""opd.client: Client, a connection to the daemon, and its operator methods.

DESIGN
A Client wraps one libopd connection (opd_client_t*). It connects when
made (connect=True, the default) or on first use, and again on first use
in a child after fork(): a connection is never shared with a parent (the
fork generation in memory.py tells; libopd would answer OPD_ESTATE).
Operator methods (c.softmax, c.layernorm, ...) are generated from the
daemon's schema list (opd_ops_json) on first attribute access; each calls
run(), which converts inputs (a numpy array is copied into a new shared
tensor), converts attributes using the schema's types, asks opd_infer for
the output shapes (cached by op, input dtypes/shapes and attributes),
allocates the outputs from the client's Allocator, builds the descriptors
(cached per tensor and connection) and calls opd_run with the GIL
released (ctypes does that), so threads overlap their requests.

Deferred work: arenas that died and blocks that were freed are queued by
finalizers and handled at the client's next call (never from inside the
garbage collector); stats() drains them first, so the daemon's figures
are up to date when a caller looks.

CUDA (see docs/python.md, "GPU"): a Client also keeps one Allocator per
CUDA device whose arenas are daemon-owned device memory (opd_alloc), so
c.empty(shape, dtype, device="cuda") carves device tensors like host
ones. Those tensors belong to this connection's session (RemoteArena):
another connection, or a child after fork, gets EARENA for them. run()
allocates outputs on the device of its device-tensor inputs and sends the
run with opd_run_on when a device is named (else the daemon's "auto").
torch CUDA tensors given as inputs or outputs are imported by their
storage's legacy CUDA IPC handle (opd_import_cuda), once per storage and
connection (an LRU of IMPORT_CACHE storages, each held alive while
cached), and used in place; before such a run the package synchronizes
torch's device (sync_torch), since opd works on its own stream in
another process. The other direction: the per-device arenas are
allocated exportable (opd_alloc_flags, CUDA VMM; plain opd_alloc when
the daemon has no VMM), and Tensor.torch() of a device tensor maps its
arena here once (opd_export_cuda's fd, see _cuda.py; _maps: arena serial
-> Mapping, dropped when the arena is released or the client closes,
unmapped when the last torch view is gone too) and returns a torch view;
runs touching a tensor of an arena with live torch views also
synchronize torch first. publish() copies a tensor into an arena of its own and
publishes that; attach() returns a read-only tensor on the attached
arena.
"""
import collections
import ctypes
import itertools
import json
import numbers
import operator
import os
import struct
import threading
import types
import weakref

from . import _cuda, _lib, errors, memory, protocol
from .errors import check
from .tensor import Tensor, device_name, dtype_name, _prod

_DT = protocol.DTYPE_CODES
_AT = protocol.ATTR_TYPE_CODES
_clients = weakref.WeakSet()
_serials = itertools.count(1)
IMPORT_CACHE = 32        # torch storages imported per connection (LRU)
_ALLOC_EXPORTABLE = 0x1  # OPD_ALLOC_EXPORTABLE
# export failures meaning "this daemon/arena cannot export": copy instead
_NO_EXPORT = (protocol.EINVAL, protocol.EPROTO, protocol.EVERSION,
              protocol.EBACKEND, protocol.EREADONLY)
_PRIORITY = {None: 0, "normal": 0, "high": 0x1}   # OPD_CONNECT_HIGH_PRIORITY
# OPD_CONNECT_WAIT_*: the transport (None: $OPD_WAIT, else libopd's default)
_WAIT = {None: 0, "spin": 0x2, "adaptive": 0x4, "socket": 0x8}


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


def _reset_locks_in_child():
    # a lock held by another thread of the parent would never be released
    for c in list(_clients):
        c._lock = threading.RLock()


os.register_at_fork(after_in_child=_reset_locks_in_child)


def socket_path(given=None):
    """Returns the socket path a connection would use for `given` (None:
    $OPD_SOCKET, else /run/opd/opd.sock as root, else
    $XDG_RUNTIME_DIR/opd.sock)."""
    lib = _lib.load()
    buf = ctypes.create_string_buffer(4096)
    check(lib.opd_socket_path(given.encode() if given else None, buf, 4096))
    return buf.value.decode()


class Request:
    """A submitted run (Client.submit). wait() returns its outputs."""
    __slots__ = ("_client", "_id", "_keep", "_result", "_done", "_token")

    def __init__(self, client, rid, keep, result, token):
        self._client, self._id, self._keep = client, rid, keep
        self._result, self._done, self._token = result, False, token

    def wait(self, timeout=None):
        """Waits for the run; returns what run() would (the outputs).
        timeout in seconds (None: forever). Raises OpdTimeoutError if it
        is still running (wait again later), or the run's OpdError."""
        if self._done:
            return self._result
        c = self._client
        h = c._handle()
        if c._token is not self._token:
            raise errors.error(protocol.ESTATE, "this request was submitted "
                               "on a connection that is gone (fork or close)")
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        rc = c._lib.opd_wait(h, self._id, ms)
        if rc == protocol.ETIMEDOUT:
            check(rc)
        self._done, self._keep = True, None
        check(rc)
        return self._result


class Prepared:
    """A run prepared once by Client.prepare(). Call it to run it (returns
    the outputs, as run() would: the same Tensors every time); submit()
    sends it without waiting. It is rebuilt by itself after the
    connection changes (fork). close() frees it (also on garbage
    collection)."""
    __slots__ = ("_client", "_op", "_inputs", "_out", "_device", "_attrs",
                 "_p", "_token", "_keep", "_result", "_torch_dev", "_free",
                 "_run", "_h")

    def __init__(self, client, op, inputs, out, device, attrs):
        self._client, self._op, self._inputs = client, op, tuple(inputs)
        self._out, self._device, self._attrs = out, device, dict(attrs)
        self._p, self._token, self._h = None, None, None
        self._free = client._need("opd_prepared_free")
        self._run = client._need("opd_run_prepared")
        self._build()

    def _build(self):
        c = self._client
        args, ret, devb = c._prepare(self._op, self._inputs, self._out,
                                     self._attrs, self._device)
        if self._out is None:             # the outputs allocated once
            self._out = ret
        p = ctypes.c_void_p()
        check(c._need("opd_prepare")(args[0], devb, *args[1:8],
                                     ctypes.byref(p)))
        self.close()
        self._p, self._token, self._keep = p, c._token, args
        self._torch_dev = args[8][3]
        self._result = ret[0] if len(ret) == 1 else (ret if ret else None)

    def _ready(self):
        c = self._client
        h = c._handle()
        if c._token is not self._token:   # a new connection: its arena ids
            self._build()
            h = c._handle()
        if self._torch_dev is not None and c.sync_torch:
            import torch
            torch.cuda.synchronize(self._torch_dev)
        # the fast path of __call__: this handle, while the connection, the
        # fork generation and the client's release queue stay as they are
        self._h = h if self._torch_dev is None else None
        return h

    def __call__(self):
        c = self._client
        h = self._h
        # the fast path (a loop of tiny ops): nothing to rebuild, release
        # or synchronize since the last call; else _ready() does it all
        if (h is None or h is not c._h or c._gen != memory._fork_gen[0] or
                c._pending_release):
            h = self._ready()
        rc = self._run(h, self._p)
        if rc:
            check(rc)
        return self._result

    def submit(self):
        """Sends the run without waiting; returns a Request (wait() returns
        the outputs)."""
        h = self._ready()
        rid = ctypes.c_uint64()
        check(self._client._lib.opd_submit_prepared(h, self._p,
                                                    ctypes.byref(rid)))
        return Request(self._client, rid.value, self._keep, self._result,
                       self._token)

    def close(self):
        """Frees the encoded request (the tensors stay as they are)."""
        p, self._p = self._p, None
        if p is not None and p.value:
            self._free(p)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Client:
    """A connection to the opd daemon; also a factory of shared tensors and
    the runner of operators (one method per daemon operator). Thread-safe.
    Use opd.connect() to make one."""

    #: synchronize torch's CUDA device before a run that uses torch CUDA
    #: tensors (opd runs on its own stream in another process); set False
    #: to do it yourself
    sync_torch = True

    def __init__(self, socket=None, connect=True, priority=None, wait=None):
        """socket: path (None: $OPD_SOCKET or the default). connect=False
        defers connecting to the first use. priority="high" asks the
        daemon for high-priority CUDA streams (latency-critical clients).
        wait: the transport — "adaptive" (shared-memory rings, spin
        briefly then sleep: the default), "spin" (rings, both sides spin:
        lowest latency, a busy core on each side) or "socket" (no rings);
        None: $OPD_WAIT, else adaptive.
        Raises OpdConnectionError if connect=True and the daemon is not
        there, LibraryNotFoundError if libopd cannot be loaded."""
        if priority not in _PRIORITY:
            raise errors.error(protocol.EINVAL, "priority must be None, "
                               "\"normal\" or \"high\", not %r" % (priority,))
        if wait not in _WAIT:
            raise errors.error(protocol.EINVAL, "wait must be None, \"spin\", "
                               "\"adaptive\" or \"socket\", not %r" % (wait,))
        self.wait = wait
        self._lib = _lib.load()
        self.socket = socket_path(socket)
        self.priority = priority
        self._h = None
        self._gen = None
        self._token = None            # identity of the current connection
        self._closed = False
        self._lock = threading.RLock()
        self._reg = {}                # arena serial -> daemon arena id
        self._pending_release = __import__("collections").deque()
        self._alloc = None
        self._dallocs = {}            # "cuda:N" -> Allocator of device arenas
        self._imports = collections.OrderedDict()  # torch storage -> arena
        self._maps = {}               # arena serial -> _cuda.Mapping (views)
        self._no_vmm = set()          # devices whose exportable alloc failed
        self._pubs = {}               # name -> the Tensor published
        self._schemas = None          # op name -> schema
        self._methods = {}
        self._infer_cache = {}
        self._desc_arrays = {}        # descriptors -> their ctypes array
        self._run_memo = {}           # (op, id(out)) -> a run's arguments
        self._op_bytes = {}
        self._serial = next(_serials)
        _clients.add(self)
        if connect:
            self._handle()

    # ---- connection --------------------------------------------------------
    def _handle(self):
        h = self._h
        if h is not None and self._gen == memory._fork_gen[0]:
            if self._pending_release:
                self._drain_releases(h)
            return h
        return self._connect()

    def _connect(self):
        with self._lock:
            if self._closed:
                raise errors.error(protocol.ECLOSED, "this opd client was "
                                   "closed; make a new one with opd.connect()")
            gen = memory._fork_gen[0]
            if self._h is not None and self._gen == gen:
                return self._h
            # a handle from before fork() is the parent's: drop it unused
            self._h, self._reg = None, {}
            self._run_memo.clear()
            self._pending_release.clear()
            self._dallocs, self._pubs = {}, {}
            self._maps, self._no_vmm = {}, set()
            self._imports = collections.OrderedDict()
            h = ctypes.c_void_p()
            flags = _PRIORITY[self.priority] | _WAIT[self.wait]
            if flags:
                check(self._need("opd_connect_flags")(
                    self.socket.encode(), flags, ctypes.byref(h)))
            else:
                check(self._lib.opd_connect(self.socket.encode(), ctypes.byref(h)))
            self._alloc = memory.Allocator(self._new_arena, self._drop_arena,
                                           gen, owner=weakref.ref(self))
            self._token = object()
            self._h, self._gen = h, gen
            return h

    def close(self):
        """Closes the connection: the daemon drops this session and its arena
        registrations. Tensors stay readable here (their memory belongs to
        the package) and usable with other clients. Returns None."""
        with self._lock:
            h, self._h = self._h, None
            self._closed = True
            if h is not None and self._gen == memory._fork_gen[0]:
                self._lib.opd_close(h)
            self._reg = {}
            self._dallocs, self._pubs = {}, {}
            self._maps = {}               # live torch views keep theirs
            self._imports = collections.OrderedDict()
            _clients.discard(self)

    @property
    def closed(self):
        """True once close() was called."""
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if not self._closed:
                self.close()
        except Exception:
            pass

    def __reduce__(self):
        # a client pickles as its socket path: it connects in the new process
        return (Client, (self.socket, False, self.priority, self.wait))

    def __repr__(self):
        state = "closed" if self._closed else ("connected" if self._h else "idle")
        return "<opd.Client %s %s>" % (self.socket, state)

    # ---- arenas --------------------------------------------------------------
    def _new_arena(self, size):
        h = self._handle()
        a = memory.create_arena(size)
        aid = ctypes.c_uint64()
        check(self._lib.opd_arena_register_fd(h, a.fd, size, ctypes.byref(aid)))
        self._reg[a.serial] = aid.value
        a.regs[self._serial] = weakref.ref(self)
        return a

    def _need(self, name):
        f = getattr(self._lib, name, None)
        if f is None:
            raise errors.error(protocol.EVERSION, "libopd at %s has no %s: it "
                               "predates the CUDA features; rebuild it (make)"
                               % (_lib.path, name))
        return f

    def _remote(self, aid, size, device, kind, readonly=False, keep=None):
        a = memory.RemoteArena(size, device, kind, self, readonly, keep)
        self._reg[a.serial] = aid
        a.regs[self._serial] = weakref.ref(self)
        return a

    def _new_device_arena(self, device, size, exportable=False):
        h = self._handle()
        aid = ctypes.c_uint64()
        fn = getattr(self._lib, "opd_alloc_flags", None)
        if exportable and fn is not None and device not in self._no_vmm:
            rc = fn(h, device.encode(), size, _ALLOC_EXPORTABLE, ctypes.byref(aid))
            if rc == 0:
                a = self._remote(aid.value, size, device, "alloc")
                a.exportable = True
                return a
            if rc != protocol.EBACKEND:       # ENOMEM, ELIMIT, EDEVICE, ...
                check(rc)
            self._no_vmm.add(device)          # no CUDA VMM: plain memory
        check(self._need("opd_alloc")(h, device.encode(), size, ctypes.byref(aid)))
        return self._remote(aid.value, size, device, "alloc")

    def _dalloc(self, device):
        a = self._dallocs.get(device)
        if a is None:
            with self._lock:
                a = self._dallocs.get(device)
                if a is None:
                    a = memory.Allocator(
                        lambda size, d=device: self._new_device_arena(d, size, True),
                        self._drop_arena, self._gen, owner=weakref.ref(self))
                    self._dallocs[device] = a
        return a

    def _drop_arena(self, arena):
        arena.regs.pop(self._serial, None)
        self._maps.pop(arena.serial, None)    # unmapped with its last view
        aid = self._reg.pop(arena.serial, None)
        if aid is not None and self._h is not None:
            self._lib.opd_arena_release(self._h, aid)  # errors: session gone

    def _drain_releases(self, h):
        while self._pending_release:
            try:
                serial = self._pending_release.popleft()
            except IndexError:
                return
            aid = self._reg.pop(serial, None)
            self._maps.pop(serial, None)
            if aid is not None:
                self._lib.opd_arena_release(h, aid)

    def _arena_id(self, arena):
        aid = self._reg.get(arena.serial)
        if aid is not None:
            return aid
        if arena.base is None:
            raise errors.error(protocol.EARENA, "this tensor is in daemon "
                               "memory (%s, %s) of another connection's "
                               "session (or of one that closed, or of the "
                               "parent before fork): device memory belongs to "
                               "one connection; copy it (t.cpu(), t.to(device, "
                               "client=c)) or publish it"
                               % (arena.kind, arena.device))
        with self._lock:
            aid = self._reg.get(arena.serial)
            if aid is None:
                out = ctypes.c_uint64()
                check(self._lib.opd_arena_register_fd(
                    self._h, arena.fd, arena.size, ctypes.byref(out)))
                aid = self._reg[arena.serial] = out.value
                arena.regs[self._serial] = weakref.ref(self)
            return aid

    def _desc(self, t):
        d = t._descs
        if d is not None and d[0] is self._token:
            return d[1]
        n = len(t.shape)
        if n > protocol.MAX_RANK:
            raise errors.error(protocol.ELIMIT, "rank %d out of 0..%d"
                               % (n, protocol.MAX_RANK))
        desc = _lib.TensorDesc()
        desc.arena = self._arena_id(t.arena)
        desc.offset = t.offset
        desc.dtype = _DT[t.dtype]
        desc.rank = n
        desc.shape[:n] = t.shape
        if not t.is_contiguous():
            desc.strided = 1
            desc.strides[:n] = t.strides
        t._descs = (self._token, desc)
        return desc

    # ---- tensors -------------------------------------------------------------
    def empty(self, shape, dtype="float32", device=None):
        """Returns a new uninitialized Tensor of `shape` (int or tuple) and
        `dtype` (name, numpy dtype/type) in shared memory, or with
        device="cuda" / "cuda:N" in the daemon's device memory (carved out
        of per-device arenas this connection allocates with opd_alloc; it
        belongs to this connection). Raises BadArgumentError for a bad
        dtype or shape, BackendError (EDEVICE) for a device the daemon
        does not have, LimitError (ENOMEM) when device memory runs out,
        OpdError if the daemon refuses a new arena."""
        if type(shape) is not tuple or not all(type(d) is int for d in shape):
            if hasattr(shape, "__index__"):
                shape = (shape,)
            shape = tuple(operator.index(d) for d in shape)
        if any(d < 0 for d in shape):
            raise errors.error(protocol.ESHAPE, "negative dimension in %s" % (shape,))
        dt = dtype_name(dtype)
        dev = device_name(device) if device is not None else "cpu"
        self._handle()
        nbytes = _prod(shape) * protocol.DTYPE_SIZES[dt]
        if dev == "cpu":
            block = self._alloc.alloc(nbytes)
        else:
            block = self._dalloc(dev).alloc(nbytes)
        return Tensor(block.state.arena, block.offset, dt, shape, None, block)

    def zeros(self, shape, dtype="float32", device=None):
        """Returns a new zero-filled Tensor (see empty); a device tensor is
        zeroed by a copy from host zeros through the daemon."""
        t = self.empty(shape, dtype, device)
        if t.arena.base is not None:
            ctypes.memset(t.data_ptr(), 0, t.nbytes)
        elif t.size:
            self.run("copy", self.zeros(t.shape, t.dtype), out=t)
        return t

    def full(self, shape, value, dtype="float32", device=None):
        """Returns a new Tensor filled with `value` (numpy not needed); on
        a device, filled here and copied there."""
        if device is not None and device_name(device) != "cpu":
            return self.full(shape, value, dtype).to(device, client=self)
        t = self.empty(shape, dtype)
        fmt = {"float32": "f", "float16": "e", "float64": "d", "int8": "b",
               "uint8": "B", "int32": "i", "int64": "q", "bool": "?"}.get(t.dtype)
        if fmt is None:
            raise errors.error(protocol.EDTYPE, "full: no Python encoding for %s" % t.dtype)
        if t.size:
            pat = struct.pack("<" + fmt, value) * t.size
            ctypes.memmove(t.data_ptr(), pat, len(pat))
        return t

    def ones(self, shape, dtype="float32", device=None):
        """Returns a new Tensor of ones (see full)."""
        return self.full(shape, 1, dtype, device)

    def empty_like(self, t, device=None):
        """Returns a new uninitialized Tensor with t's shape and dtype, on
        `device` (None: t's device)."""
        return self.empty(t.shape, t.dtype, t.device if device is None else device)

    def zeros_like(self, t, device=None):
        """Returns a new zero-filled Tensor with t's shape and dtype, on
        `device` (None: t's device)."""
        return self.zeros(t.shape, t.dtype, t.device if device is None else device)

    def from_numpy(self, a, device=None):
        """Returns a new Tensor holding a copy of numpy array (or array-like)
        `a` (one copy into shared memory; a non-contiguous array is made
        contiguous); with device="cuda" / "cuda:N", copied on into device
        memory. Raises BadArgumentError for an unsupported dtype."""
        import numpy as np
        a = np.asarray(a)
        t = self.empty(a.shape, a.dtype)
        if t.size:
            np.copyto(np.asarray(t), a, casting="no")
        if device is not None and device_name(device) != "cpu":
            return t.to(device, client=self)
        return t

    def from_torch(self, x):
        """Returns a Tensor for torch tensor x. A CUDA tensor is used in
        place, with no copy: its storage is imported into this connection
        by CUDA IPC handle (once per storage; the storage is kept alive
        while cached, see forget_imports), so outputs the daemon writes
        into it are visible in torch. A CPU tensor is copied into shared
        memory (torch.from_dlpack(t) of an opd Tensor is the zero-copy way
        round). Raises BadArgumentError for an unsupported dtype or a
        handle that does not open."""
        if not _is_torch(x):
            raise errors.error(protocol.EINVAL, "from_torch: %r is not a torch "
                               "tensor" % type(x).__name__)
        if x.is_cuda:
            return self._from_torch_cuda(x)
        x = x.detach()
        dt = dtype_name(x.dtype)
        t = self.empty(tuple(x.shape), dt)
        if t.size:
            t.torch().copy_(x)
        return t

    def _convert(self, x):
        if _is_torch(x):
            return self.from_torch(x)
        return self.from_numpy(x)

    def _from_torch_cuda(self, x):
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
            return self.empty(tuple(x.shape), dt, device=dev)
        key = (idx, st.data_ptr(), st.nbytes())
        a = self._imports.get(key)
        if a is None:
            a = self._import_storage(st, dev, key)
        else:
            try:
                self._imports.move_to_end(key)
            except KeyError:
                pass
        strides = None if x.is_contiguous() else tuple(x.stride())
        return Tensor(a, x.storage_offset() * x.element_size(), dt,
                      tuple(x.shape), strides, a)

    def _import_storage(self, st, dev, key):
        h = self._handle()
        fn = self._need("opd_import_cuda")
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
        with self._lock:
            a = self._imports.get(key)
            if a is not None:
                return a
            aid = ctypes.c_uint64()
            rc = fn(h, raw, 64, offset, size, dev.encode(), ctypes.byref(aid))
            if rc == protocol.ELIMIT and self._imports:
                self._imports.clear()            # arena ids back, try again
                self._drain_releases(h)
                rc = fn(h, raw, 64, offset, size, dev.encode(), ctypes.byref(aid))
            check(rc)
            a = self._remote(aid.value, size, dev, "import", keep=st)
            self._imports[key] = a
            while len(self._imports) > IMPORT_CACHE:
                self._imports.popitem(last=False)
            return a

    def import_cuda(self, handle, offset, size, device="cuda:0"):
        """Imports bytes [offset, offset+size) of another allocation of this
        process's own CUDA memory by its IPC handle (64 bytes, or torch's
        66-byte form) and returns them as a writable uint8 Tensor of shape
        (size,) on `device`. The low-level path under from_torch. Raises
        BadArgumentError: EINVAL (the handle does not open), EBOUNDS (the
        range exceeds the allocation); BackendError (EDEVICE)."""
        h = self._handle()
        dev = device_name(device)
        aid = ctypes.c_uint64()
        check(self._need("opd_import_cuda")(h, _ipc_handle(handle), 64, offset,
                                            size, dev.encode(), ctypes.byref(aid)))
        a = self._remote(aid.value, size, dev, "import")
        return Tensor(a, 0, "uint8", (size,), None, a)

    def forget_imports(self):
        """Drops the cache of imported torch storages: their arena ids are
        released and torch may free the memory. Returns None."""
        with self._lock:
            self._imports.clear()
        if self._h is not None:
            self._handle()

    # ---- zero-copy torch views of device tensors -----------------------------
    def _torch_view(self, t):
        """Returns a zero-copy torch CUDA tensor over device tensor t (of
        this connection), or None if its arena cannot be exported (not
        allocated exportable, or the daemon or libopd cannot export)."""
        a = t.arena
        if not getattr(a, "exportable", False):
            return None
        m = self._maps.get(a.serial)
        if m is None:
            m = self._map_arena(a)
            if m is None:
                return None
        return _cuda.torch_view(m, t)

    def _map_arena(self, a):
        import torch
        torch.cuda.init()
        dev = int(a.device[5:])
        with self._lock:
            m = self._maps.get(a.serial)
            if m is not None:
                return m
            h = self._handle()
            aid = self._arena_id(a)
            fn = getattr(self._lib, "opd_export_cuda", None)
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
            self._maps[a.serial] = m
            return m

    def torch_views(self):
        """Returns the number of device arenas of this connection mapped
        here for zero-copy torch views (Tensor.torch)."""
        return len(self._maps)

    # ---- published tensors ---------------------------------------------------
    def publish(self, name, t, readers=None):
        """Publishes a copy of tensor t (a host or device Tensor, or a torch
        tensor) under `name` (at most 63 bytes, no "/"), for other
        connections of the daemon to attach read-only (c.attach). The name
        belongs to this process's uid: connections of the same uid attach
        it as `name`, and other uids only if `readers` lists them, as
        "user/name" or "uid/name". readers: None (this uid only) or a list
        of uids (int), user names, "group:NAME" / "group:GID" (members of
        the group) or "*" (every client the daemon serves); root and the
        daemon's own uid may attach any name. The copy gets an arena of its
        own (device memory for a device tensor) and dtype, shape and offset
        travel as JSON meta. The name lasts until unpublish(name) or until
        this connection closes; the memory lasts while any attachment
        does. Returns the published Tensor (this connection's own copy:
        writing it changes what attachers read). Raises BadArgumentError
        (EINVAL: name taken by this uid, empty or with a "/"; an unknown
        user or group in readers)."""
        h = self._handle()
        if readers is None:
            fn, extra = self._need("opd_publish"), ()
        else:
            if isinstance(readers, (str, bytes, numbers.Integral)):
                raise TypeError("readers must be a list of uids, user names, "
                                "'group:NAME' or '*', not %r" % (readers,))
            fn = self._need("opd_publish2")
            rs = [str(int(r)) if isinstance(r, numbers.Integral) and
                  not isinstance(r, bool) else r for r in readers]
            for r in rs:
                if not isinstance(r, str):
                    raise TypeError("readers entries are uids (int) or "
                                    "strings, not %r" % (r,))
            arr = (ctypes.c_char_p * max(len(rs), 1))(
                *[r.encode() for r in rs])
            extra = (arr, len(rs))
        if not isinstance(t, Tensor):
            t = self._convert(t)
        nbytes = max(t.nbytes, 1)
        if t.device == "cpu":
            arena = self._new_arena((nbytes + 4095) & ~4095)
            own = Tensor(arena, 0, t.dtype, t.shape, None, arena)
            if t.arena.base is not None and t.is_contiguous():
                ctypes.memmove(own.data_ptr(), t.data_ptr(), t.nbytes)
            elif t.size:
                self.run("copy", t, out=own)
        else:
            arena = self._new_device_arena(t.device, (nbytes + 255) & ~255)
            own = Tensor(arena, 0, t.dtype, t.shape, None, arena)
            if t.size:
                self.run("copy", t, out=own)
        meta = json.dumps({"dtype": t.dtype, "shape": list(t.shape),
                           "offset": 0}, separators=(",", ":"))
        check(fn(h, self._arena_id(arena), name.encode(), meta.encode(),
                 *extra))
        self._pubs[name] = own
        return own

    def unpublish(self, name):
        """Withdraws `name`; attachments made before keep working. Raises
        BadArgumentError (ENOENT: nothing published under it; EINVAL:
        another connection published it). Returns None."""
        check(self._need("opd_unpublish")(self._handle(), name.encode()))
        self._pubs.pop(name, None)

    def attach(self, name):
        """Returns the tensor published under `name` as a read-only Tensor of
        this connection (on "cpu" or "cuda:N": the publisher's memory, no
        copy). Use it as an input anywhere; as an output the daemon refuses
        it (BadArgumentError, EREADONLY). It is not mapped here: numpy(),
        cpu() and torch() copy it. `name` is one of this uid's names, or
        "user/name" ("uid/name") for another uid's name shared with this
        one. Raises BadArgumentError (ENOENT) if nothing is published under
        that name, or it is another uid's and not shared with this uid (the
        two are not told apart)."""
        h = self._handle()
        aid, size = ctypes.c_uint64(), ctypes.c_uint64()
        dev = ctypes.create_string_buffer(64)
        meta = ctypes.create_string_buffer(512)
        check(self._need("opd_attach")(h, name.encode(), ctypes.byref(aid),
                                       ctypes.byref(size), dev, 64, meta, 512))
        device = dev.value.decode() or "cpu"
        a = self._remote(aid.value, size.value, device, "attach", readonly=True)
        try:
            m = json.loads(meta.value.decode()) if meta.value else {}
            dt = dtype_name(m["dtype"])
            shape = tuple(int(d) for d in m["shape"])
            off = int(m.get("offset", 0))
        except Exception:           # published without (our) meta: bytes
            dt, shape, off = "uint8", (size.value,), 0
        return Tensor(a, off, dt, shape, None, a)

    tensor = from_numpy

    def as_tensor(self, x):
        """Returns x if it is a Tensor, else from_numpy(x) (a copy)."""
        return x if isinstance(x, Tensor) else self.from_numpy(x)

    # ---- running operators ---------------------------------------------------
    def _attrs(self, schema, kw):
        if not kw:
            return None, (), ()
        types_ = {a["name"]: a["type"] for a in schema["attrs"]} if schema else {}
        arr = (_lib.AttrDesc * len(kw))()
        keep, key = [], []
        for i, (name, v) in enumerate(kw.items()):
            a = arr[i]
            nb = name.encode()
            keep.append(nb)
            a.name = nb
            want = types_.get(name)
            if isinstance(v, (bool,)) or type(v).__name__ == "bool_":
                a.type, a.i = _AT["bool"], int(bool(v))
                val = bool(v)
            elif isinstance(v, str):
                sb = v.encode()
                keep.append(sb)
                a.type, a.s = _AT["str"], sb
                val = v
            elif isinstance(v, (list, tuple)):
                vals = [operator.index(x) for x in v]
                if not 1 <= len(vals) <= protocol.MAX_RANK:
                    raise errors.error(protocol.EATTR, "attribute %s: %d ints, "
                                       "expected 1..%d" % (name, len(vals),
                                                           protocol.MAX_RANK))
                a.type, a.n = _AT["ints"], len(vals)
                a.ints[:len(vals)] = vals
                val = tuple(vals)
            elif hasattr(v, "__index__") and want != "float":
                if want == "ints":
                    a.type, a.n = _AT["ints"], 1
                    a.ints[0] = operator.index(v)
                else:
                    a.type, a.i = _AT["int"], operator.index(v)
                val = operator.index(v)
            elif isinstance(v, numbers.Real):
                a.type, a.f = _AT["float"], float(v)
                val = float(v)
            else:
                raise errors.error(protocol.EATTR, "attribute %s: %r is not "
                                   "an int, float, bool, str or list of ints"
                                   % (name, v))
            key.append((name, a.type, val))
        return arr, keep, tuple(key)

    def _schema(self, op):
        if self._schemas is None:
            self.ops()
        return self._schemas.get(op)

    def _prepare(self, op, inputs, out, attrs, device):
        h = self._handle()
        ins = list(inputs)
        while ins and ins[-1] is None:        # optional trailing inputs
            ins.pop()
        torch_dev = None                      # a torch CUDA tensor's device
        odev = "cpu"                          # where new outputs go
        maps = self._maps
        for i, x in enumerate(ins):
            if type(x) is not Tensor:
                if x is None:
                    raise errors.error(protocol.EINVAL, "%s: input %d is None "
                                       "but a later input is given" % (op, i))
                if not isinstance(x, Tensor):
                    if _is_torch(x) and x.is_cuda:
                        torch_dev = x.device
                    ins[i] = x = self._convert(x)
            if maps and self._viewed(x):
                torch_dev = x.arena.device        # torch may use its view
            if odev == "cpu":
                odev = x.arena.device
        devb = None
        if device is not None:
            dev = device_name(device, auto=True)
            if dev == "cpu":
                odev = "cpu"
            devb = dev.encode()
        if attrs:
            attr_arr, keep, akey = self._attrs(self._schema(op), attrs)
        else:
            attr_arr, keep, akey = None, (), ()
        ob = self._op_bytes.get(op)
        if ob is None:
            ob = self._op_bytes[op] = op.encode()
        if out is None:
            spec = self._infer(h, ob, ins, attr_arr, akey)
            ret = outs = tuple([self.empty(shape, dt, odev) for dt, shape in
                                spec]) if spec else ()
        else:
            ret = (out,) if isinstance(out, Tensor) or _is_torch(out) else tuple(out)
            outs = []
            for o in ret:
                if not isinstance(o, Tensor):
                    if not (_is_torch(o) and o.is_cuda):
                        raise errors.error(protocol.EINVAL, "%s: an output must "
                                           "be an opd Tensor or a torch CUDA "
                                           "tensor, not %s (CPU torch tensors "
                                           "are not in shared memory)"
                                           % (op, type(o).__name__))
                    torch_dev = o.device
                    o = self._from_torch_cuda(o)
                elif self._maps and self._viewed(o):
                    torch_dev = o.arena.device
                outs.append(o)
            outs = tuple(outs)
        if torch_dev is not None and self.sync_torch:
            import torch
            torch.cuda.synchronize(torch_dev)
        n_in, n_out = len(ins), len(outs)
        in_arr = self._desc_array(ins)
        out_arr = self._desc_array(outs)
        return (h, ob, in_arr, n_in, out_arr, n_out, attr_arr, len(attrs),
                (ins, outs, keep, torch_dev)), ret, devb

    def _desc_array(self, ts):
        """The descriptors of tensors ts as libopd takes them (a pointer to
        the first of n): one descriptor as itself (ctypes passes its
        address), several as an array, cached by the descriptors (each
        Tensor keeps its own, so a loop over the same tensors builds no
        array)."""
        if not ts:
            return None
        if len(ts) == 1:
            return self._desc(ts[0])
        descs = [self._desc(t) for t in ts]
        key = tuple(map(id, descs))   # the entry keeps descs alive: ids hold
        hit = self._desc_arrays.get(key)
        if hit is None:
            if len(self._desc_arrays) >= 256:
                self._desc_arrays.clear()
            hit = self._desc_arrays[key] = ((_lib.TensorDesc * len(descs))(*descs),
                                            descs)
        return hit[0]

    def _viewed(self, t):
        m = self._maps.get(t.arena.serial)
        return m is not None and len(m.views) > 0

    def _infer(self, h, ob, ins, attr_arr, akey):
        key = (ob, tuple([(t.dtype, t.shape) for t in ins]), akey)
        r = self._infer_cache.get(key)
        if r is not None:
            return r
        n = len(ins)
        in_arr = (_lib.TensorDesc * n)(*[self._desc(t) for t in ins]) if n else None
        outs = (_lib.TensorDesc * protocol.MAX_TENSORS)()
        n_out = ctypes.c_uint32()
        check(self._lib.opd_infer(h, ob, in_arr, n, attr_arr, len(akey), outs,
                                  protocol.MAX_TENSORS, ctypes.byref(n_out)))
        r = tuple((protocol.DTYPE_NAMES[o.dtype], tuple(o.shape[:o.rank]))
                  for o in outs[:n_out.value])
        if len(self._infer_cache) > 4096:
            self._infer_cache.clear()
        self._infer_cache[key] = r
        return r

    def run(self, op, *inputs, out=None, device=None, **attrs):
        """Runs operator `op` on inputs (Tensors; numpy arrays are copied in;
        torch CUDA tensors are used in place; trailing None drops optional
        inputs) with attributes as keywords. out: a Tensor or torch CUDA
        tensor, or a tuple for several outputs, to write into (an input
        itself for in-place ops); None allocates them on the device of the
        device-tensor inputs (else in host memory). device: where it runs,
        "cpu", "cuda", "cuda:N" or "auto" (None: the daemon's auto, which
        is where the device tensors are, else the cpu); host tensors on a
        cuda run are staged by the daemon and new outputs stay on the host.
        Returns the output (as given in out, or new Tensors), a tuple if
        the op has several, or None if it has none. Raises
        BadArgumentError (and other OpdError subclasses) with the daemon's
        message."""
        return self._run(op, inputs, out, device, attrs)

    def _run(self, op, inputs, out, device, attrs):
        m = self._run_memo.get((op, id(out)))
        if (m is not None and m[0] is self._token and m[3] == device and
                m[4] == attrs):
            hit = self._memo_run(m, inputs, out)
            if hit is not _MISS:
                return hit
        args, outs, devb = self._prepare(op, inputs, out, attrs, device)
        if devb is None:
            check(self._lib.opd_run(*args[:8]))
        else:
            check(self._need("opd_run_on")(args[0], devb, *args[1:8]))
        if out is not None or not outs:
            self._memo_store(op, inputs, out, device, attrs, args, outs, devb)
        if len(outs) == 1:
            return outs[0]
        return outs if outs else None

    # A loop that calls run() (c.softmax(x, out=y)) with the same opd
    # Tensors, attributes and device each time reuses what _prepare built
    # the first time, and from the second call on a request libopd encoded
    # once (as Client.prepare does). The memo, per (op, id(out)), holds the
    # tensors weakly and is used only while each argument is the very
    # object it was made for and the connection the same. Numpy inputs
    # (copied in per call), torch tensors and torch views (synced per call)
    # and new outputs (out=None for an op that has outputs) always take the
    # full path.
    _MEMO_MAX = 16

    def _memo_store(self, op, inputs, out, device, attrs, args, outs, devb):
        if self._maps or args[8][3] is not None:
            return
        for v in attrs.values():   # compared by ==: immutable values only
            t = type(v)
            if t is tuple:
                for e in v:
                    if type(e) not in _MEMO_SCALARS:
                        return
            elif t not in _MEMO_SCALARS:
                return
        for x in inputs:
            if type(x) is not Tensor:
                return
        for o in outs:
            if type(o) is not Tensor:
                return
        memo = self._run_memo
        if len(memo) >= self._MEMO_MAX:
            memo.clear()
        # [connection, inputs, outputs, device, attrs, libopd's arguments
        # after the handle, device bytes, the attribute buffers they use,
        # the encoded request (_Encoded, from the second call on)]
        memo[(op, id(out))] = [
            self._token, tuple([weakref.ref(x) for x in inputs]),
            tuple([weakref.ref(o) for o in outs]), device, dict(attrs),
            args[1:8], devb, args[8][2], None]

    def _memo_run(self, m, inputs, out):
        refs, orefs = m[1], m[2]
        h = self._h
        if (len(inputs) != len(refs) or h is None or self._pending_release or
                self._gen != memory._fork_gen[0] or self._maps):
            return _MISS
        for r, x in zip(refs, inputs):
            if r() is not x:
                return _MISS
        if type(out) is Tensor:
            if len(orefs) != 1 or orefs[0]() is not out:
                return _MISS
            res = out
        elif out is None or type(out) is tuple or type(out) is list:
            outs = () if out is None else tuple(out)
            if len(outs) != len(orefs):
                return _MISS
            for r, o in zip(orefs, outs):
                if r() is not o:
                    return _MISS
            res = outs[0] if len(outs) == 1 else (outs if outs else None)
        else:
            return _MISS
        prep = m[8]
        if prep is None:
            p = ctypes.c_void_p()
            check(self._need("opd_prepare")(h, m[6], *m[5], ctypes.byref(p)))
            prep = m[8] = _Encoded(p, self._need("opd_prepared_free"),
                                   self._need("opd_run_prepared"))
        rc = prep.run(h, prep.p)
        if rc:
            check(rc)
        return res

    def submit(self, op, *inputs, out=None, device=None, **attrs):
        """Sends a run without waiting (as run()); returns a Request whose
        wait() returns the outputs. Runs of one client execute in order.
        The Request keeps every tensor it uses alive until waited for;
        outputs (torch ones included) are complete only after wait()."""
        args, outs, devb = self._prepare(op, inputs, out, attrs, device)
        rid = ctypes.c_uint64()
        if devb is None:
            check(self._lib.opd_submit(*args[:8], ctypes.byref(rid)))
        else:
            check(self._need("opd_submit_on")(args[0], devb, *args[1:8],
                                              ctypes.byref(rid)))
        res = outs[0] if len(outs) == 1 else (outs if outs else None)
        return Request(self, rid.value, args, res, self._token)

    def prepare(self, op, *inputs, out=None, device=None, **attrs):
        """Prepares a run (arguments as run()) to be repeated: libopd
        encodes the request once, and each call of the returned Prepared
        costs one ctypes call and the round trip, none of run()'s argument
        handling (the lowest-latency way to call the same op on the same
        tensors in a loop). The tensors are fixed: outputs allocated here
        (out=None) are the same Tensors on every call, so keep what you
        need before the next one. Argument errors that only the daemon
        checks are raised by each call, as run() raises them."""
        return Prepared(self, op, inputs, out, device, attrs)

    def infer(self, op, *inputs, **attrs):
        """Returns [(dtype, shape)] of the outputs `op` would write for these
        inputs and attributes (cached). Raises BadArgumentError."""
        h = self._handle()
        ins = [x if isinstance(x, Tensor) else self._convert(x)
               for x in inputs if x is not None]
        attr_arr, keep, akey = self._attrs(self._schema(op), attrs)
        return list(self._infer(h, op.encode(), ins, attr_arr, akey))

    def nms(self, boxes, scores, iou_threshold, out=None):
        """Non-maximum suppression (torchvision.ops.nms): boxes (N, 4) as
        (x1, y1, x2, y2), scores (N). Returns the kept indices, by
        descending score, as an int64 Tensor of length count: a view of the
        daemon's keep output (N, padded with -1), which stays allocated
        while the view lives. out=(keep, count) reuses two tensors."""
        keep, count = self.run("nms", boxes, scores, out=out,
                               iou_threshold=iou_threshold)
        if _is_torch(count):
            return keep[:int(count.reshape(-1)[0])]
        if count.arena.base is None:             # on a device: copy it here
            n = struct.unpack("<q", count.tobytes()[:8])[0]
        else:
            n = ctypes.c_int64.from_address(count.data_ptr()).value
        return keep[:n]

    # ---- daemon information --------------------------------------------------
    def _json(self, fn):
        h = self._handle()
        p, n = ctypes.c_void_p(), ctypes.c_size_t()
        check(fn(h, ctypes.byref(p), ctypes.byref(n)))
        return json.loads(_lib.take_string(p, n))

    def ops(self):
        """Returns {name: schema} for every operator of the daemon (schema as
        in docs/protocol.md: inputs, outputs, attrs, shape, inplace, ...)."""
        if self._schemas is None:
            self._schemas = {o["name"]: o for o in
                             self._json(self._lib.opd_ops_json)["ops"]}
        return dict(self._schemas)

    @property
    def transport(self):
        """The transport in use: "spin", "adaptive" or "socket" (a spin
        asked for where the daemon's host has no cores to spare is given
        adaptive; transport_why says why)."""
        f = getattr(self._lib, "opd_transport", None)
        return f(self._handle()).decode() if f is not None else self.wait

    @property
    def transport_why(self):
        """Why the transport is not the one asked for ("" if it is)."""
        f = getattr(self._lib, "opd_transport_why", None)
        return f(self._handle()).decode() if f is not None else ""

    def stats(self):
        """Returns the daemon's statistics as a dict (sessions, requests,
        errors, arenas, bytes_mapped, ops, ...), after releasing what this
        client had pending, so the figures are current."""
        h = self._handle()
        if self._alloc is not None:
            self._alloc.drain()
        self._drain_releases(h)
        return self._json(self._lib.opd_stats_json)

    def memory_stats(self):
        """Returns this client's allocator figures: {"arenas",
        "bytes_mapped", "bytes_used"}."""
        self._handle()
        return self._alloc.stats()

    def server_info(self):
        """Returns the daemon's hello reply (version, session, backends,
        limits) as a dict."""
        return self._json(self._lib.opd_server_info)

    def devices(self):
        """Returns the CUDA devices the daemon uses, as names ["cuda:0",
        ...] (empty without a GPU)."""
        return [d["device"] for d in self.server_info().get("devices") or []]

    def ping(self):
        """Makes one round trip that runs nothing. Returns None."""
        check(self._lib.opd_ping(self._handle()))

    # ---- generated operator methods ------------------------------------------
    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        m = self._methods.get(name)
        if m is not None:
            return m
        schema = self._schema(name)
        if schema is None:
            raise AttributeError("%r is neither a Client attribute nor an "
                                 "operator of the daemon (c.ops() lists them)"
                                 % name)
        m = types.MethodType(_make_method(schema), self)
        self._methods[name] = m
        self.__dict__[name] = m  # found directly from now on, no __getattr__
        return m

    def __dir__(self):
        names = set(super().__dir__())
        try:
            names.update(self.ops())
        except errors.OpdError:
            pass
        return sorted(names)


_MISS = object()   # _memo_run: not the memo's call
_MEMO_SCALARS = (int, float, bool, str)


class _Encoded:
    """A run request libopd encoded once (opd_prepare), freed with its
    memo entry."""
    __slots__ = ("p", "free", "run")

    def __init__(self, p, free, run):
        self.p, self.free, self.run = p, free, run

    def __del__(self):
        try:
            self.free(self.p)
        except Exception:
            pass


def _make_method(schema):
    op = schema["name"]

    def method(self, *inputs, out=None, device=None, **attrs):
        return self._run(op, inputs, out, device, attrs)

    ins = ", ".join(i["name"] + ("=None" if i["optional"] else "")
                    for i in schema["inputs"])
    at = ", ".join("%s=%r" % (a["name"], a["default"]) if not a["required"]
                   else a["name"] for a in schema["attrs"])
    method.__name__ = op
    method.__doc__ = "%s(%s%s, out=None, device=None)\n\n%s.\nshape: %s\n%s%s" % (
        op, ins, (", " + at) if at else "", schema["summary"], schema["shape"],
        "".join("attr %s (%s): %s\n" % (a["name"], a["type"], a["doc"])
                for a in schema["attrs"]),
        "In-place allowed (out=x).\n" if schema["inplace"] else "")
    return method


def connect(socket=None, connect=True, priority=None, wait=None):
    """Returns a Client connected to the daemon at `socket` (None:
    $OPD_SOCKET, else the default path). priority="high" asks for
    high-priority CUDA streams (latency-critical clients). wait="spin",
    "adaptive" (default) or "socket" picks the transport (Client). Use as a
    context manager to close it. Raises OpdConnectionError (ECONNECT)
    naming the socket tried and how to start the daemon if it is not
    running."""
    return Client(socket, connect=connect, priority=priority, wait=wait)
