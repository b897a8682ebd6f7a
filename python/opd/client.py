"""opd.client: Client, a connection to the daemon, and the public API.

DESIGN
A Client wraps one libopd connection (opd_client_t*). It connects when
made (connect=True, the default) or on first use, and again on first use
in a child after fork(): a connection is never shared with a parent (the
fork generation in memory.py tells; libopd would answer OPD_ESTATE).
This file holds the connection (connect, close, fork, pickling), the
tensor factories, the public run API (run, submit, prepare with
Prepared, Request, infer, nms) and the daemon's information (ops, stats,
server_info, ...). The rest of Client comes from mixins, one concern
each (a method is looked up once per type, so a mixin's method costs a
call what a method of Client costs):
  _runner.py   Runner: arguments as libopd takes them (tensors, attrs,
               devices to descriptors), the infer/descriptor caches and
               the run memo (requests libopd encoded once)
  _torch.py    TorchInterop: from_torch, torch CUDA tensors imported by
               IPC handle, zero-copy torch views of device tensors
  _arenas.py   Arenas: the arenas this connection registers (host by fd,
               device by opd_alloc), their ids and deferred releases
  _publish.py  Publishing: publish, unpublish, attach
  _ops.py      OpMethods: the operator methods generated from the schema
All of Client's state is made in Client.__init__ and reset in _connect.

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
import collections
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
from ._ops import OpMethods
from ._publish import Publishing
from ._runner import Runner
from ._runner import OPD_RUN_ASYNC, OPD_RUN_STREAM, cuda_index, prepare_flags
from ._torch import TorchInterop, _is_torch, current_stream, sync_device
from ._torch import IMPORT_CACHE  # noqa: F401 (opd.client.IMPORT_CACHE, as before)
from .errors import check
from .tensor import Tensor, device_name, dtype_name, _prod

_clients = weakref.WeakSet()
_serials = itertools.count(1)
_PRIORITY = {None: 0, "normal": 0, "high": 0x1}   # OPD_CONNECT_HIGH_PRIORITY
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


class Request:
    """A submitted run (Client.submit). wait() returns its outputs."""
    __slots__ = ("_client", "_id", "_keep", "_result", "_done", "_token",
                 "_settle")

    def __init__(self, client, rid, keep, result, token, settle=False):
        self._client, self._id, self._keep = client, rid, keep
        self._result, self._done, self._token = result, False, token
        self._settle = settle

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
        if self._settle:        # answered at enqueue: torch reads it next
            c.synchronize()
        return self._result


class Prepared:
    """A run prepared once by Client.prepare(). Call it to run it (returns
    the outputs, as run() would: the same Tensors every time); submit()
    sends it without waiting. It is rebuilt by itself after the
    connection changes (fork). close() frees it (also on garbage
    collection). It is sent as run() would send it: in torch's stream
    order when it touches torch's memory, asynchronously on device
    memory."""
    __slots__ = ("_client", "_op", "_inputs", "_out", "_device", "_attrs",
                 "_p", "_token", "_keep", "_result", "_torch_dev", "_free",
                 "_run", "_h", "_stream", "_async")

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
        self._torch_dev, on_dev = args[8][3], args[8][4]
        self._stream = self._async = None
        flags = 0
        if self._torch_dev is not None and \
                getattr(c._lib, "opd_run_prepared_stream", None) is not None:
            self._stream = cuda_index(self._torch_dev)   # in torch's order
            devb, flags = ("cuda:%d" % self._stream).encode(), OPD_RUN_STREAM
        elif on_dev and self._torch_dev is None:
            flags = OPD_RUN_ASYNC
        p = ctypes.c_void_p()
        check(prepare_flags(c, args[0], devb, args[1:8], flags, p))
        if flags == OPD_RUN_ASYNC and getattr(c._lib, "opd_prepare_flags", None):
            self._async = True
        self.close()
        self._p, self._token, self._keep = p, c._token, args
        self._result = ret[0] if len(ret) == 1 else (ret if ret else None)

    def _ready(self):
        c = self._client
        h = c._handle()
        if c._token is not self._token:   # a new connection: its arena ids
            self._build()
            h = c._handle()
        fallback = self._torch_dev is not None and self._stream is None
        if fallback and c.sync_torch:
            sync_device(self._torch_dev)
        # the fast path of __call__: this handle, while the connection, the
        # fork generation and the client's release queue stay as they are
        self._h = None if fallback else h
        return h

    def __call__(self):
        c = self._client
        h = self._h
        # the fast path (a loop of tiny ops): nothing to rebuild, release
        # or synchronize since the last call; else _ready() does it all
        if (h is None or h is not c._h or c._gen != memory._fork_gen[0] or
                c._pending_release):
            h = self._ready()
        if self._stream is not None:
            rc = c._lib.opd_run_prepared_stream(h, self._p,
                                                current_stream(self._stream))
        else:
            if self._async:
                c._unsynced = True
            rc = self._run(h, self._p)
        if rc:
            check(rc)
        return self._result

    def submit(self):
        """Sends the run without waiting; returns a Request (wait() returns
        the outputs: a run on device memory is then enqueued, one on
        torch's memory complete)."""
        h = self._ready()
        c = self._client
        if self._stream is not None and c.sync_torch:
            sync_device(self._torch_dev)  # what torch queued, done first
        if self._async:
            c._unsynced = True
        rid = ctypes.c_uint64()
        check(c._lib.opd_submit_prepared(h, self._p, ctypes.byref(rid)))
        return Request(c, rid.value, self._keep, self._result, self._token,
                       settle=self._stream is not None)

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


class Client(OpMethods, Runner, Arenas, TorchInterop, Publishing):
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
        # _arenas.py
        self._reg = {}                # arena serial -> daemon arena id
        self._pending_release = collections.deque()  # serials to release
        self._alloc = None            # Allocator of host arenas
        self._dallocs = {}            # "cuda:N" -> Allocator of device arenas
        self._no_vmm = set()          # devices whose exportable alloc failed
        # _torch.py
        self._imports = collections.OrderedDict()  # torch storage -> arena
        self._maps = {}               # arena serial -> _cuda.Mapping (views)
        # _publish.py
        self._pubs = {}               # name -> the Tensor published
        # _ops.py and ops()
        self._schemas = None          # op name -> schema
        self._methods = {}            # op name -> generated bound method
        # _runner.py
        self._infer_cache = {}        # (op, inputs, attrs) -> output specs
        self._desc_arrays = {}        # descriptors -> their ctypes array
        self._run_memo = {}           # (op, id(out)) -> a run's arguments
        self._op_bytes = {}           # op name -> its bytes
        self._unsynced = False        # async runs sent since synchronize()
        self._tensor_cuda = None      # libopd's opd_tensor_cuda (False: none)
        self._run_ptrs = None         # ... opd_run_stream_ptrs (False: none)
        self._run_async = None        # ... opd_run_async (False: none)
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
            self._unsynced = False
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
                unbind = getattr(self._lib, "opd_torch_unbind", None)
                if unbind is not None:   # opd.torch's C kernels drop it
                    unbind(h)
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

    tensor = from_numpy

    def as_tensor(self, x):
        """Returns x if it is a Tensor, else from_numpy(x) (a copy)."""
        return x if isinstance(x, Tensor) else self.from_numpy(x)

    # ---- running operators ---------------------------------------------------
    def _schema(self, op):
        if self._schemas is None:
            self.ops()
        return self._schemas.get(op)

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

    def submit(self, op, *inputs, out=None, device=None, **attrs):
        """Sends a run without waiting (as run()); returns a Request whose
        wait() returns the outputs. Runs of one client execute in order.
        The Request keeps every tensor it uses alive until waited for;
        outputs (torch ones included) are complete only after wait()."""
        args, outs, devb = self._prepare(op, inputs, out, attrs, device)
        if args[8][3] is not None and self.sync_torch:
            sync_device(args[8][3])       # answered when done: torch's first
        rid = ctypes.c_uint64()
        if devb is None:
            check(self._lib.opd_submit(*args[:8], ctypes.byref(rid)))
        else:
            check(self._need("opd_submit_on")(args[0], devb, *args[1:8],
                                              ctypes.byref(rid)))
        res = outs[0] if len(outs) == 1 else (outs if outs else None)
        return Request(self, rid.value, args, res, self._token)

    def synchronize(self):
        """Waits until every run this client sent has completed (runs on
        device memory return once enqueued: docs/async.md). Returns None;
        raises the OpdError of the first asynchronous run that failed
        since the last synchronize ("an earlier asynchronous run failed:
        <op> (request N): ...")."""
        h = self._handle()
        fn = getattr(self._lib, "opd_synchronize", None)
        self._unsynced = False
        if fn is not None:
            check(fn(h))

    def _settle(self):
        """synchronize() when asynchronous runs may be in flight."""
        if self._unsynced:
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
        in docs/protocol.md: inputs, outputs, attrs, shape, inplace, ...,
        and "origin": "built-in" or the file of the plugin it comes from)."""
        if self._schemas is None:
            schemas = {o["name"]: o for o in
                       self._json(self._lib.opd_ops_json)["ops"]}
            origins = self.plugins().get("origins", {})
            for name, o in schemas.items():
                o["origin"] = origins.get(name, "built-in")
            self._schemas = schemas
        return dict(self._schemas)

    def plugins(self):
        """Returns the daemon's operator plugins: {"plugins": [{"name",
        "version", "path", "abi", "ops": [names]}], "origins": {op:
        "built-in" or the plugin's path}} (docs/operators.md). A daemon or
        libopd without plugins gives {"plugins": [], "origins": {}}."""
        fn = getattr(self._lib, "opd_plugins_json", None)
        if fn is None:
            return {"plugins": [], "origins": {}}
        try:
            return self._json(fn)
        except errors.ProtocolError:      # a daemon older than PLUGINS
            return {"plugins": [], "origins": {}}

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


def connect(socket=None, connect=True, priority=None, wait=None):
    """Returns a Client connected to the daemon at `socket` (None:
    $OPD_SOCKET, else the default path). priority="high" asks for
    high-priority CUDA streams (latency-critical clients). wait="spin",
    "adaptive" (default) or "socket" picks the transport (Client). Use as a
    context manager to close it. Raises OpdConnectionError (ECONNECT)
    naming the socket tried and how to start the daemon if it is not
    running."""
    return Client(socket, connect=connect, priority=priority, wait=wait)
