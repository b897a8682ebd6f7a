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
"""
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

from . import _lib, errors, memory, protocol
from .errors import check
from .tensor import Tensor, dtype_name, _prod

_DT = protocol.DTYPE_CODES
_AT = protocol.ATTR_TYPE_CODES
_clients = weakref.WeakSet()
_serials = itertools.count(1)


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


class Client:
    """A connection to the opd daemon; also a factory of shared tensors and
    the runner of operators (one method per daemon operator). Thread-safe.
    Use opd.connect() to make one."""

    def __init__(self, socket=None, connect=True):
        """socket: path (None: $OPD_SOCKET or the default). connect=False
        defers connecting to the first use. Raises OpdConnectionError if
        connect=True and the daemon is not there, LibraryNotFoundError if
        libopd cannot be loaded."""
        self._lib = _lib.load()
        self.socket = socket_path(socket)
        self._h = None
        self._gen = None
        self._token = None            # identity of the current connection
        self._closed = False
        self._lock = threading.RLock()
        self._reg = {}                # arena serial -> daemon arena id
        self._pending_release = __import__("collections").deque()
        self._alloc = None
        self._schemas = None          # op name -> schema
        self._methods = {}
        self._infer_cache = {}
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
            self._pending_release.clear()
            h = ctypes.c_void_p()
            check(self._lib.opd_connect(self.socket.encode(), ctypes.byref(h)))
            self._alloc = memory.Allocator(self._new_arena, self._drop_arena, gen)
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
        return (Client, (self.socket, False))

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

    def _drop_arena(self, arena):
        arena.regs.pop(self._serial, None)
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
            if aid is not None:
                self._lib.opd_arena_release(h, aid)

    def _arena_id(self, arena):
        aid = self._reg.get(arena.serial)
        if aid is not None:
            return aid
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
    def empty(self, shape, dtype="float32"):
        """Returns a new uninitialized Tensor of `shape` (int or tuple) and
        `dtype` (name, numpy dtype/type) in shared memory. Raises
        BadArgumentError for a bad dtype or shape, OpdError if the daemon
        refuses a new arena."""
        if type(shape) is not tuple or not all(type(d) is int for d in shape):
            if hasattr(shape, "__index__"):
                shape = (shape,)
            shape = tuple(operator.index(d) for d in shape)
        if any(d < 0 for d in shape):
            raise errors.error(protocol.ESHAPE, "negative dimension in %s" % (shape,))
        dt = dtype_name(dtype)
        self._handle()
        block = self._alloc.alloc(_prod(shape) * protocol.DTYPE_SIZES[dt])
        return Tensor(block.state.arena, block.offset, dt, shape, None, block)

    def zeros(self, shape, dtype="float32"):
        """Returns a new zero-filled Tensor (see empty)."""
        t = self.empty(shape, dtype)
        ctypes.memset(t.data_ptr(), 0, t.nbytes)
        return t

    def full(self, shape, value, dtype="float32"):
        """Returns a new Tensor filled with `value` (numpy not needed)."""
        t = self.empty(shape, dtype)
        fmt = {"float32": "f", "float16": "e", "float64": "d", "int8": "b",
               "uint8": "B", "int32": "i", "int64": "q", "bool": "?"}.get(t.dtype)
        if fmt is None:
            raise errors.error(protocol.EDTYPE, "full: no Python encoding for %s" % t.dtype)
        if t.size:
            pat = struct.pack("<" + fmt, value) * t.size
            ctypes.memmove(t.data_ptr(), pat, len(pat))
        return t

    def ones(self, shape, dtype="float32"):
        """Returns a new Tensor of ones (see full)."""
        return self.full(shape, 1, dtype)

    def empty_like(self, t):
        """Returns a new uninitialized Tensor with t's shape and dtype."""
        return self.empty(t.shape, t.dtype)

    def zeros_like(self, t):
        """Returns a new zero-filled Tensor with t's shape and dtype."""
        return self.zeros(t.shape, t.dtype)

    def from_numpy(self, a):
        """Returns a new Tensor holding a copy of numpy array (or array-like)
        `a` (one copy into shared memory; a non-contiguous array is made
        contiguous). Raises BadArgumentError for an unsupported dtype."""
        import numpy as np
        a = np.asarray(a)
        t = self.empty(a.shape, a.dtype)
        if t.size:
            np.copyto(np.asarray(t), a, casting="no")
        return t

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

    def _prepare(self, op, inputs, out, attrs):
        h = self._handle()
        ins = list(inputs)
        while ins and ins[-1] is None:        # optional trailing inputs
            ins.pop()
        for i, x in enumerate(ins):
            if x is None:
                raise errors.error(protocol.EINVAL, "%s: input %d is None but a "
                                   "later input is given" % (op, i))
            if not isinstance(x, Tensor):
                ins[i] = self.from_numpy(x)
        schema = self._schema(op)
        attr_arr, keep, akey = self._attrs(schema, attrs)
        ob = self._op_bytes.get(op)
        if ob is None:
            ob = self._op_bytes[op] = op.encode()
        if out is None:
            outs = tuple(self.empty(shape, dt)
                         for dt, shape in self._infer(h, ob, ins, attr_arr, akey))
        elif isinstance(out, Tensor):
            outs = (out,)
        else:
            outs = tuple(out)
        n_in, n_out = len(ins), len(outs)
        in_arr = (_lib.TensorDesc * n_in)(*[self._desc(t) for t in ins]) if n_in else None
        out_arr = (_lib.TensorDesc * n_out)(*[self._desc(t) for t in outs]) if n_out else None
        return (h, ob, in_arr, n_in, out_arr, n_out, attr_arr, len(attrs),
                (ins, outs, keep)), outs

    def _infer(self, h, ob, ins, attr_arr, akey):
        key = (ob, tuple((t.dtype, t.shape) for t in ins), akey)
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

    def run(self, op, *inputs, out=None, **attrs):
        """Runs operator `op` on inputs (Tensors; numpy arrays are copied in;
        trailing None drops optional inputs) with attributes as keywords.
        out: a Tensor, or a tuple for several outputs, to write into (an
        input itself for in-place ops); None allocates them. Returns the
        output Tensor, a tuple of them if the op has several, or None if it
        has none. Raises BadArgumentError (and other OpdError subclasses)
        with the daemon's message."""
        args, outs = self._prepare(op, inputs, out, attrs)
        check(self._lib.opd_run(*args[:8]))
        if len(outs) == 1:
            return outs[0]
        return outs if outs else None

    def submit(self, op, *inputs, out=None, **attrs):
        """Sends a run without waiting (as run()); returns a Request whose
        wait() returns the outputs. Runs of one client execute in order.
        The Request keeps every tensor it uses alive until waited for."""
        args, outs = self._prepare(op, inputs, out, attrs)
        rid = ctypes.c_uint64()
        check(self._lib.opd_submit(*args[:8], ctypes.byref(rid)))
        res = outs[0] if len(outs) == 1 else (outs if outs else None)
        return Request(self, rid.value, args, res, self._token)

    def infer(self, op, *inputs, **attrs):
        """Returns [(dtype, shape)] of the outputs `op` would write for these
        inputs and attributes (cached). Raises BadArgumentError."""
        h = self._handle()
        ins = [x if isinstance(x, Tensor) else self.from_numpy(x)
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
        return m

    def __dir__(self):
        names = set(super().__dir__())
        try:
            names.update(self.ops())
        except errors.OpdError:
            pass
        return sorted(names)


def _make_method(schema):
    op = schema["name"]

    def method(self, *inputs, out=None, **attrs):
        return self.run(op, *inputs, out=out, **attrs)

    ins = ", ".join(i["name"] + ("=None" if i["optional"] else "")
                    for i in schema["inputs"])
    at = ", ".join("%s=%r" % (a["name"], a["default"]) if not a["required"]
                   else a["name"] for a in schema["attrs"])
    method.__name__ = op
    method.__doc__ = "%s(%s%s, out=None)\n\n%s.\nshape: %s\n%s%s" % (
        op, ins, (", " + at) if at else "", schema["summary"], schema["shape"],
        "".join("attr %s (%s): %s\n" % (a["name"], a["type"], a["doc"])
                for a in schema["attrs"]),
        "In-place allowed (out=x).\n" if schema["inplace"] else "")
    return method


def connect(socket=None, connect=True):
    """Returns a Client connected to the daemon at `socket` (None:
    $OPD_SOCKET, else the default path). Use as a context manager to close
    it. Raises OpdConnectionError (ECONNECT) naming the socket tried and
    how to start the daemon if it is not running."""
    return Client(socket, connect=connect)
