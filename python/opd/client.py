"""opd.client: Client, a connection to the daemon, and the public API.

DESIGN
A Client wraps one libopd connection (opd_client_t*). It connects when
made (connect=True, the default) or on first use, and again on first use
in a child after fork(): a connection is never shared with a parent (the
fork generation in memory.py tells; libopd would answer OPD_ESTATE).
This file holds the connection (connect, close, fork, pickling: _h,
_gen, _token, _lock, _lib), the tensor factories, the public run API
(run, submit, prepare, infer, nms; Request and Prepared in _prepared.py)
and the daemon's information (ops, stats, server_info, ...). The rest is
done by parts, each an object that owns its state, made in __init__ and
reached through its attribute (each holds the Client for the connection
and the parts it uses, and changes only its own state):
  _arenas   _arenas.py   Arenas: the arenas this connection registers
                         (host by fd, device by opd_alloc), their ids,
                         the allocators and deferred releases
  _torch    _torch.py    TorchInterop: from_torch, torch CUDA tensors
                         imported by IPC handle, zero-copy torch views
  _pubs     _publish.py  Publications: publish, unpublish, attach
  _ops      _ops.py      Ops: the daemon's schemas and the operator
                         methods generated from them (__getattr__)
  _runner   _runner.py   Runner: arguments as libopd takes them (a Run),
                         the infer/descriptor caches, the run memo
  _graphs   _graph.py    Graphs: the graphs this connection defined
_connect resets each part for a new connection. The private names other
modules and the tests use (_pending_release, _alloc, _maps, _run_memo,
_unsynced, _arena_id, _settle, ...) are delegations to the part that owns
them.

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
"""
import ctypes
import itertools
import json
import operator
import os
import struct
import threading
import weakref

from . import _lib, errors, memory, protocol
from ._arenas import Arenas
from ._graph import Graph, Graphs
from ._ops import Ops
from ._prepared import Prepared, Request
from ._publish import Publications
from ._runner import Runner
from ._torch import TorchInterop, _is_torch, sync_device
from ._torch import IMPORT_CACHE  # noqa: F401 (opd.client.IMPORT_CACHE, as before)
from .errors import check
from .tensor import Tensor, device_name, dtype_name, _prod

_clients = weakref.WeakSet()
_serials = itertools.count(1)
# the class of service (docs/scheduling.md): OPD_CONNECT_LATENCY or none
_PRIORITY = {None: 0, "normal": 0, "best-effort": 0, "high": 0x1, "latency": 0x1}
# OPD_CONNECT_WAIT_*: the transport (None: $OPD_WAIT, else libopd's default)
_WAIT = {None: 0, "spin": 0x2, "adaptive": 0x4, "socket": 0x8}


def _reset_locks_in_child():
    # a lock held by another thread of the parent would never be released
    for c in list(_clients):
        c._lock = threading.RLock()


os.register_at_fork(after_in_child=_reset_locks_in_child)


def socket_path(given=None):
    """Returns the socket path a connection would use for `given` (None:
    $OPD_SOCKET, else /run/opd/opd.sock when it exists, else
    $XDG_RUNTIME_DIR/opd.sock)."""
    lib = _lib.load()
    buf = ctypes.create_string_buffer(4096)
    check(lib.opd_socket_path(given.encode() if given else None, buf, 4096))
    return buf.value.decode()


class Client:
    """A connection to the opd daemon; also a factory of shared tensors and
    the runner of operators (one method per daemon operator). Thread-safe.
    Use opd.connect() to make one."""

    #: with a libopd without stream-ordered runs (opd_run_stream):
    #: synchronize torch's CUDA device before a run that uses torch CUDA
    #: tensors (opd runs on its own stream in another process); set False
    #: to do it yourself. Runs are otherwise ordered with torch's current
    #: stream on the GPU, and this is not needed.
    sync_torch = True

    def __init__(self, socket=None, connect=True, priority=None, wait=None):
        """socket: path (None: $OPD_SOCKET or the default). connect=False
        defers connecting to the first use. priority="latency" (or its
        older name "high") asks for the latency class of service:
        high-priority CUDA streams and CPU runs ahead of best-effort ones
        (docs/scheduling.md); "best-effort" (or "normal", the default).
        wait: the transport — "adaptive" (shared-memory rings, spin
        briefly then sleep: the default), "spin" (rings, both sides spin:
        lowest latency, a busy core on each side) or "socket" (no rings);
        None: $OPD_WAIT, else adaptive.
        Raises OpdConnectionError if connect=True and the daemon is not
        there, LibraryNotFoundError if libopd cannot be loaded."""
        if priority not in _PRIORITY:
            raise errors.error(protocol.EINVAL, "priority must be None, "
                               "\"latency\" (\"high\") or \"best-effort\" "
                               "(\"normal\"), not %r" % (priority,))
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
        self._serial = next(_serials)
        # the parts (see DESIGN)
        self._arenas = arenas = Arenas(self)
        self._torch = TorchInterop(self, arenas)
        arenas.on_release = self._torch.unmap
        self._pubs = Publications(self, arenas)
        self._ops = Ops(self)
        self._runner = Runner(self, arenas, self._torch, self._ops)
        self._graphs = Graphs(self)
        # memory.py's finalizers queue released arenas here: the Arenas
        # part's deque (cleared, never replaced)
        self._pending_release = arenas.pending
        _clients.add(self)
        if connect:
            self._handle()

    # ---- connection --------------------------------------------------------
    def _handle(self):
        h = self._h
        if h is not None and self._gen == memory._fork_gen[0]:
            if self._pending_release:
                self._arenas.drain(h)
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
            self._h = None
            self._arenas.reset()
            self._runner.reset()
            self._pubs.reset()
            self._torch.reset()
            self._graphs.pending.clear()   # went with the old session
            h = ctypes.c_void_p()
            flags = _PRIORITY[self.priority] | _WAIT[self.wait]
            if flags:
                check(self._need("opd_connect_flags")(
                    self.socket.encode(), flags, ctypes.byref(h)))
            else:
                check(self._lib.opd_connect(self.socket.encode(), ctypes.byref(h)))
            self._arenas.reset(gen)      # the host Allocator of this one
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
            self._graphs.close()          # the session takes them along
            if h is not None and self._gen == memory._fork_gen[0]:
                unbind = getattr(self._lib, "opd_torch_unbind", None)
                if unbind is not None:   # opd.torch's C kernels drop it
                    unbind(h)
                self._lib.opd_close(h)
            self._arenas.reset()
            self._pubs.reset()
            self._torch.reset()           # live torch views keep their maps
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

    # ---- libopd --------------------------------------------------------------
    def _need(self, name):
        f = getattr(self._lib, name, None)
        if f is None:
            raise errors.error(protocol.EVERSION, "libopd at %s has no %s: it "
                               "predates the CUDA features; rebuild it (make)"
                               % (_lib.path, name))
        return f

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
        limit = self._arena_limit()
        if limit is not None and nbytes > limit:
            raise errors.error(protocol.ELIMIT, "empty: %s %s is %d bytes, over "
                               "the daemon's limit of %d bytes per arena "
                               "(max_arena_bytes: opd --max-arena-bytes)"
                               % (dt, shape, nbytes, limit))
        if dev == "cpu":
            block = self._arenas.alloc.alloc(nbytes)
        else:
            block = self._arenas.dalloc(dev).alloc(nbytes)
        return Tensor(block.state.arena, block.offset, dt, shape, None, block)

    def _arena_limit(self):
        """The daemon's max_arena_bytes (its hello's limits), once."""
        lim = self.__dict__.get("_max_arena")
        if lim is None:
            lim = (self.server_info().get("limits") or {}).get("max_arena_bytes")
            self._max_arena = lim
        return lim

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

    tensor = from_numpy

    def as_tensor(self, x):
        """Returns x if it is a Tensor, else from_numpy(x) (a copy)."""
        return x if isinstance(x, Tensor) else self.from_numpy(x)

    # ---- running operators ---------------------------------------------------
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
        return self._runner.run(op, inputs, out, device, attrs)

    def submit(self, op, *inputs, out=None, device=None, **attrs):
        """Sends a run without waiting (as run()); returns a Request whose
        wait() returns the outputs. Runs of one client execute in order.
        The Request keeps every tensor it uses alive until waited for;
        outputs (torch ones included) are complete only after wait()."""
        r, outs, devb = self._runner.prepare(op, inputs, out, attrs, device)
        if r.torch_dev is not None and self.sync_torch:
            sync_device(r.torch_dev)      # answered when done: torch's first
        rid = ctypes.c_uint64()
        if devb is None:
            check(self._lib.opd_submit(r.h, *r.c_args(), ctypes.byref(rid)))
        else:
            check(self._need("opd_submit_on")(r.h, devb, *r.c_args(),
                                              ctypes.byref(rid)))
        res = outs[0] if len(outs) == 1 else (outs if outs else None)
        return Request(self, rid.value, r, res, self._token)

    def synchronize(self):
        """Waits until every run this client sent has completed (runs on
        device memory return once enqueued: docs/async.md). Returns None;
        raises the OpdError of the first asynchronous run that failed
        since the last synchronize ("an earlier asynchronous run failed:
        <op> (request N): ...")."""
        h = self._handle()
        fn = getattr(self._lib, "opd_synchronize", None)
        self._runner.unsynced = False
        if fn is not None:
            check(fn(h))

    def _settle(self):
        """synchronize() when asynchronous runs may be in flight."""
        if self._runner.unsynced:
            self.synchronize()

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

    def graph(self, device="cpu", name=None, cls=None):
        """Returns a new Graph to build (docs/python.md, "Graphs"): inputs,
        constants, a method per operator, outputs; defined in the daemon
        on leaving its `with` block (or by define()), then run() as one
        request per call on `device` ("cpu", "cuda", "cuda:N"). name:
        for the daemon's logs and stats. cls: "latency" or "best-effort",
        the class of service of its runs instead of the connection's."""
        return Graph(self, device, name, cls)

    def infer(self, op, *inputs, **attrs):
        """Returns [(dtype, shape)] of the outputs `op` would write for these
        inputs and attributes (cached). Raises BadArgumentError."""
        h = self._handle()
        runner = self._runner
        ins = [x if isinstance(x, Tensor) else runner.convert(x)
               for x in inputs if x is not None]
        attr_arr, keep, akey = runner.attrs(self._ops.schema(op), attrs)
        return list(runner.infer(h, op.encode(), ins, attr_arr, akey))

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
    def ops(self):
        """Returns {name: schema} for every operator of the daemon (schema as
        in docs/protocol.md: inputs, outputs, attrs, shape, inplace, ...,
        and "origin": "built-in" or the file of the plugin it comes from)."""
        return dict(self._ops.all())

    def plugins(self):
        """Returns the daemon's operator plugins: {"plugins": [{"name",
        "version", "path", "abi", "ops": [names]}], "origins": {op:
        "built-in" or the plugin's path}} (docs/operators.md). A daemon or
        libopd without plugins gives {"plugins": [], "origins": {}}."""
        return self._ops.plugins()

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
        if self._arenas.alloc is not None:
            self._arenas.alloc.drain()
        self._arenas.drain(h)
        self._graphs.drain(h)
        return self._json(self._lib.opd_stats_json)

    def memory_stats(self):
        """Returns this client's allocator figures: {"arenas",
        "bytes_mapped", "bytes_used"}."""
        self._handle()
        return self._arenas.alloc.stats()

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

    def _json(self, fn):
        """fn(h, &text, &len)'s JSON reply, parsed."""
        h = self._handle()
        p, n = ctypes.c_void_p(), ctypes.c_size_t()
        check(fn(h, ctypes.byref(p), ctypes.byref(n)))
        return json.loads(_lib.take_string(p, n))

    # ---- the operator methods (the Ops part) ---------------------------------
    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        m = self._ops.method(name)
        if m is None:
            raise AttributeError("%r is neither a Client attribute nor an "
                                 "operator of the daemon (c.ops() lists them)"
                                 % name)
        self.__dict__[name] = m  # found directly from now on, no __getattr__
        return m

    def __dir__(self):
        names = set(super().__dir__())
        try:
            names.update(self.ops())
        except errors.OpdError:
            pass
        return sorted(names)

    # ---- torch (the TorchInterop part) -----------------------------------------
    def from_torch(self, x):
        return self._torch.from_torch(x)

    def import_cuda(self, handle, offset, size, device="cuda:0"):
        return self._torch.import_cuda(handle, offset, size, device)

    def forget_imports(self):
        return self._torch.forget_imports()

    def wire_device(self, idx):
        return self._torch.wire_device(idx)

    def torch_views(self):
        return self._torch.torch_views()

    # ---- publications (the Publications part) --------------------------------
    def publish(self, name, t, readers=None):
        return self._pubs.publish(name, t, readers)

    def unpublish(self, name):
        return self._pubs.unpublish(name)

    def attach(self, name):
        return self._pubs.attach(name)

    # ---- the parts' state and helpers, by the names the package and tests use
    def _arena_id(self, arena):
        return self._arenas.arena_id(arena)

    def _dalloc(self, device):
        return self._arenas.dalloc(device)

    def _from_torch_cuda(self, x):
        return self._torch.from_torch_cuda(x)

    def _torch_view(self, t):
        return self._torch.torch_view(t)

    _alloc = property(lambda self: self._arenas.alloc,
                      doc="the Allocator of host arenas (Arenas part)")
    _reg = property(lambda self: self._arenas.reg,
                    doc="arena serial -> daemon arena id (Arenas part)")
    _maps = property(lambda self: self._torch.maps,
                     doc="arena serial -> torch view mapping (TorchInterop)")
    _imports = property(lambda self: self._torch.imports,
                        doc="imported torch storages (TorchInterop part)")
    _run_memo = property(lambda self: self._runner.memo,
                         doc="the run memo (Runner part)")
    _unsynced = property(lambda self: self._runner.unsynced,
                         doc="asynchronous runs sent since synchronize()")


for _name, _part in (("from_torch", TorchInterop), ("import_cuda", TorchInterop),
                     ("forget_imports", TorchInterop),
                     ("wire_device", TorchInterop), ("torch_views", TorchInterop),
                     ("publish", Publications), ("unpublish", Publications),
                     ("attach", Publications)):
    getattr(Client, _name).__doc__ = getattr(_part, _name).__doc__
del _name, _part


def connect(socket=None, connect=True, priority=None, wait=None):
    """Returns a Client connected to the daemon at `socket` (None:
    $OPD_SOCKET, else the default path). priority="high" asks for
    high-priority CUDA streams (latency-critical clients). wait="spin",
    "adaptive" (default) or "socket" picks the transport (Client). Use as a
    context manager to close it. Raises OpdConnectionError (ECONNECT)
    naming the socket tried and how to start the daemon if it is not
    running."""
    return Client(socket, connect=connect, priority=priority, wait=wait)
