"""opd._graph: graphs built in Python (Client.graph), defined once in the
daemon and run as one request each.

DESIGN
A Graph, made by Client.graph, is first a builder: input(), const(),
node() (any op by name) and one method per daemon operator (generated
from its schema on first attribute access, as the Client's op methods
are) record the definition here, as Values (one value of the graph: an
input, a constant or one output of a node), and output() names what a
run writes. define() (or leaving the `with` block without an exception)
packs the constants given as arrays or torch tensors into one arena the
Graph owns (copied then, kept with the Graph), sends the definition
through libopd's builder (opd_graph_def_new, opd_graph_input / const /
node / output, opd_graph_define) in the order the wire numbers values
(inputs, constants, nodes), and reads the output shapes the daemon
inferred (opd_graph_def_outputs). From then on the Graph runs (run(),
submit(): the Runs mixin, _graphrun.py). A graph id belongs to the
connection that defined it: after fork or a reconnect the Graph defines
itself again on the new one. Graphs, held by the Client as `_graphs`,
owns the client's live Graphs (closed with the client) and the ids of
Graphs collected by the garbage collector, destroyed at the next
define() or stats() (never from inside the collector).
"""
import collections
import ctypes
import numbers
import weakref

from . import _lib, errors, memory, protocol
from ._graphrun import Runs
from ._ops import describe
from ._torch import _is_torch
from .errors import check
from .tensor import Tensor, device_name, dtype_name

Output = collections.namedtuple("Output", "shape dtype")


class Value:
    """One value of a graph being built: an input, a constant or one output
    of a node. `kind` is "input", "const" or the producing op's name;
    `shape` and `dtype` are known for inputs and constants (None for node
    outputs: the daemon infers them at define). Arithmetic operators build
    nodes: a + b, a - b, a * b, a / b, a @ b."""
    __slots__ = ("graph", "index", "kind", "name", "shape", "dtype", "source",
                 "tensor")
    __array_ufunc__ = None      # numpy defers: array + value builds a node

    def __init__(self, graph, index, kind, name, shape=None, dtype=None):
        self.graph, self.index, self.kind, self.name = graph, index, kind, name
        self.shape, self.dtype = shape, dtype
        self.source = None       # a constant's array or opd Tensor
        self.tensor = None       # a constant's opd Tensor once defined

    def __repr__(self):
        return "<opd graph value %d: %s %s%s>" % (
            self.index, self.kind, self.name,
            "" if self.shape is None else " %s %s" % (self.dtype, self.shape))

    def __add__(self, o):
        return self.graph.node("add", self, o)

    def __radd__(self, o):
        return self.graph.node("add", o, self)

    def __sub__(self, o):
        return self.graph.node("sub", self, o)

    def __rsub__(self, o):
        return self.graph.node("sub", o, self)

    def __mul__(self, o):
        return self.graph.node("mul", self, o)

    def __rmul__(self, o):
        return self.graph.node("mul", o, self)

    def __truediv__(self, o):
        return self.graph.node("div", self, o)

    def __rtruediv__(self, o):
        return self.graph.node("div", o, self)

    def __matmul__(self, o):
        return self.graph.node("matmul", self, o)


class _Node:
    __slots__ = ("op", "ins", "attrs", "outs")

    def __init__(self, op, ins, attrs, outs):
        self.op, self.ins, self.attrs, self.outs = op, ins, attrs, outs


class Graph(Runs):
    """A graph of daemon operators (see Client.graph): a builder until
    defined, then run with run() / submit() until close()."""

    def __init__(self, client, device="cpu", name=None, cls=None):
        if cls not in (None, "latency", "best-effort"):
            raise errors.error(protocol.EINVAL, "graph: cls must be None, "
                               "\"latency\" or \"best-effort\", not %r" % (cls,))
        self.cls = cls            # class of service (None: the connection's)
        self._c = client
        self.device = device_name(device if device is not None else "cpu")
        self.name = name
        self._values, self._inputs, self._consts = [], [], []
        self._nodes, self._out = [], []
        self.id = None            # the daemon's graph id once defined
        self.outputs = None       # [Output(shape, dtype)] once defined
        self.temp_bytes = None    # the intermediates' bytes once defined
        self._state = "building"  # "defined", "closed"
        self._token = None        # the connection it is defined on
        self._arena = None        # the arena of the copied constants
        self._staging = {}        # input index -> staging Tensor
        self._own_outs = {}       # device -> the outputs run() allocated
        self._memo = {}           # tensor ids -> _Prep
        self._fast = None         # the last call: (inputs, out, handle, _Prep, result)
        self.prepares = 0         # runs libopd encoded (opd_graph_prepare)

    def __repr__(self):
        return "<opd.Graph %r %s on %s, %d nodes>" % (
            self.name, self._state if self.id is None else
            "%s id %d" % (self._state, self.id), self.device, len(self._nodes))

    def _label(self):
        """"graph NAME" (or "graph ID") for error messages."""
        return "graph %s" % (self.name or (self.id if self.id is not None else ""))

    # ---- building ------------------------------------------------------------
    def _building(self):
        if self._state != "building":
            raise errors.error(protocol.ESTATE, "%s is %s: it can no "
                               "longer be changed" % (self._label(), self._state))

    def _value(self, kind, name, shape=None, dtype=None):
        v = Value(self, len(self._values), kind, name, shape, dtype)
        self._values.append(v)
        return v

    def input(self, name, shape, dtype="float32"):
        """Declares the next input (run() takes them in this order):
        `shape` a tuple of ints, `dtype` a name or numpy dtype. Returns
        its Value."""
        self._building()
        shape = (shape,) if isinstance(shape, numbers.Integral) else \
            tuple(int(d) for d in shape)
        if len(shape) > protocol.MAX_RANK or any(d < 0 for d in shape):
            raise errors.error(protocol.ESHAPE, "graph input %s: shape %s is "
                               "not a shape of rank <= %d" % (name, shape,
                                                              protocol.MAX_RANK))
        v = self._value("input", str(name), shape, dtype_name(dtype))
        self._inputs.append(v)
        return v

    def const(self, x, name=None):
        """A constant: an opd Tensor of this client (used in place: an
        attached published tensor, or one of its own, which must then
        live as long as the graph: it is kept here), or a numpy array,
        torch tensor or Python number, copied at define into an arena this
        Graph owns (a float becomes float32, an int int64). Returns its
        Value."""
        self._building()
        if isinstance(x, Value):
            raise errors.error(protocol.EINVAL, "const: %r is already a value "
                               "of a graph" % (x,))
        if not isinstance(x, Tensor):
            x = _host_array(x)
        v = self._value("const", name or "c%d" % len(self._consts),
                        tuple(x.shape), dtype_name(x.dtype))
        v.source = x
        self._consts.append(v)
        return v

    def node(self, op, *inputs, n_out=None, **attrs):
        """A node running operator `op` on `inputs` (Values; anything else
        becomes a constant, see const; trailing None drops optional
        inputs) with attributes as keywords (as Client.run takes them).
        n_out: its number of outputs (None: the op's). Returns its output
        Value, a tuple of them when it has several, None when none."""
        self._building()
        ins = list(inputs)
        while ins and ins[-1] is None:
            ins.pop()
        vals = []
        for i, x in enumerate(ins):
            if x is None:
                raise errors.error(protocol.EINVAL, "%s: input %d is None but "
                                   "a later input is given" % (op, i))
            if isinstance(x, Value):
                if x.graph is not self:
                    raise errors.error(protocol.EINVAL, "%s: input %d is a "
                                       "value of another graph" % (op, i))
                vals.append(x)
            else:
                vals.append(self.const(x))
        schema = self._c._ops.schema(op)
        self._c._runner.attrs(schema, attrs)   # refuses bad attributes now
        if n_out is None:
            n_out = len(schema["outputs"]) if schema else 1
        outs = tuple(self._value(op, "%s.%d" % (op, len(self._nodes))
                                 if n_out == 1 else "%s.%d:%d" %
                                 (op, len(self._nodes), k))
                     for k in range(n_out))
        self._nodes.append(_Node(op, vals, dict(attrs), outs))
        if n_out == 1:
            return outs[0]
        return outs if outs else None

    def output(self, *values):
        """Appends `values` (node outputs) to the graph's outputs: a run
        writes them into its outputs in this order. Returns None."""
        self._building()
        for v in values:
            if not isinstance(v, Value) or v.graph is not self:
                raise errors.error(protocol.EINVAL, "output: %r is not a value "
                                   "of this graph" % (v,))
            self._out.append(v)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        schema = self._c._ops.schema(name)
        if schema is None:
            raise AttributeError("%r is neither a Graph attribute nor an "
                                 "operator of the daemon (c.ops() lists them)"
                                 % name)

        def method(*inputs, n_out=None, **attrs):
            return self.node(name, *inputs, n_out=n_out, **attrs)
        method.__name__ = name
        method.__doc__ = describe(schema, "n_out=None") + \
            "A graph node: returns its output Value(s).\n"
        self.__dict__[name] = method
        return method

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None and self._state == "building":
            self.define()
        return False

    # ---- defining ------------------------------------------------------------
    def define(self):
        """Sends the definition to the daemon, which checks every node
        (op, arity, attributes, dtypes and shapes), plans the intermediates
        and returns the graph's id; sets `id` and `outputs`
        ([Output(shape, dtype)]). Returns self. Raises the daemon's
        OpdError (e.g. BadArgumentError naming the node and the shapes);
        the Graph then stays a builder."""
        self._building()
        if not self._out:
            raise errors.error(protocol.EINVAL, "%s has no outputs: "
                               "name them with output()" % (self._label()))
        self._pack_consts()
        self._define(self._c._handle())
        return self

    def _pack_consts(self):
        """Copies the constants given as arrays into one new arena: host
        memory, or for a device graph (whose constants must be on its
        device) device memory of this connection, filled by one copy."""
        arrays = [v for v in self._consts if not isinstance(v.source, Tensor)]
        if not arrays or self._arena is not None:
            return
        offs, size = [], 0
        for v in arrays:
            offs.append(size)
            size += (v.source.nbytes + 63) & ~63
        c = self._c
        arena = host = c._arenas.new_arena((max(size, 1) + 4095) & ~4095)
        for v, off in zip(arrays, offs):
            if v.source.nbytes:
                ctypes.memmove(host.base + off, v.source.ctypes.data,
                               v.source.nbytes)
        if self.device != "cpu":
            arena = c._arenas.new_device_arena(self.device, (size + 255) & ~255)
            if size:
                c.run("copy", Tensor(host, 0, "uint8", (size,), None, host),
                      out=Tensor(arena, 0, "uint8", (size,), None, arena))
            c._settle()
        for v, off in zip(arrays, offs):
            v.tensor = Tensor(arena, off, v.dtype, v.shape, None, arena)
        self._arena = arena

    def _define(self, h):
        c = self._c
        need = c._need
        c._graphs.drain(h)
        d = need("opd_graph_def_new")()
        if not d:
            raise errors.error(protocol.ENOMEM, "opd_graph_def_new: out of memory")
        arr = (_lib.TensorDesc * protocol.MAX_TENSORS)()
        n = ctypes.c_uint32()
        try:
            self._emit(d)
            gid = ctypes.c_uint64()
            dev = None if self.device == "cpu" else self.device.encode()
            if self.cls is not None:
                check(need("opd_graph_def_class")(d, self.cls.encode()))
            check(need("opd_graph_define")(h, dev, d, ctypes.byref(gid)))
            check(need("opd_graph_def_outputs")(d, arr, protocol.MAX_TENSORS,
                                                ctypes.byref(n)))
            tb = ctypes.c_uint64()
            check(need("opd_graph_def_temp_bytes")(d, ctypes.byref(tb)))
            self.temp_bytes = tb.value
        finally:
            need("opd_graph_def_free")(d)
        self.id, self._token, self._state = gid.value, c._token, "defined"
        self._memo.clear()
        self._fast = None
        c._graphs.add(self)
        self.outputs = [Output(tuple(o.shape[:o.rank]),
                               protocol.DTYPE_NAMES[o.dtype])
                        for o in arr[:n.value]]

    def _emit(self, d):
        """Adds the definition to libopd's builder d (inputs, constants,
        nodes, outputs); the ids libopd gives are mapped from the Values'."""
        c = self._c
        lib, runner = c._lib, c._runner
        ids = {}
        for v in self._inputs:
            shape = (ctypes.c_int64 * max(len(v.shape), 1))(*v.shape)
            ids[v.index] = check(lib.opd_graph_input(
                d, v.name.encode(), protocol.DTYPE_CODES[v.dtype], len(v.shape),
                shape))
        for v in self._consts:
            t = v.source if isinstance(v.source, Tensor) else v.tensor
            v.tensor = t
            ids[v.index] = check(lib.opd_graph_const(d, v.name.encode(),
                                                     ctypes.byref(runner.desc(t))))
        for nd in self._nodes:
            n = len(nd.ins)
            ins = (ctypes.c_int * max(n, 1))(*[ids[x.index] for x in nd.ins])
            arr, keep, key = runner.attrs(c._ops.schema(nd.op), nd.attrs)
            first = check(lib.opd_graph_node(d, nd.op.encode(), ins, n, arr,
                                             len(key), len(nd.outs)))
            for k, v in enumerate(nd.outs):
                ids[v.index] = first + k
        for v in self._out:
            check(lib.opd_graph_output(d, ids[v.index]))

    # ---- the end -------------------------------------------------------------
    def close(self):
        """Destroys the graph in the daemon (its intermediates and its hold
        on the constants' arenas go) and frees its prepared runs. The
        Graph can no longer run. Returns None."""
        state, self._state = self._state, "closed"
        self._memo.clear()
        self._fast = None
        c = self._c
        c._graphs.discard(self)
        if (state == "defined" and not c.closed and c._h is not None and
                c._token is self._token and c._gen == memory._fork_gen[0]):
            check(c._need("opd_graph_destroy")(c._h, self.id))

    def _forget(self):
        """The client closed: its session, and the graph with it, is gone."""
        self._state = "closed"
        self._memo.clear()
        self._fast = None

    def __del__(self):
        try:
            if self._state == "defined":
                self._c._graphs.gone(self.id, self._token)
        except Exception:
            pass


class Graphs:
    """A Client's graphs: the live ones (closed with the client) and the
    ids of those collected, destroyed at the next drain()."""

    def __init__(self, client):
        self._c = client
        self.live = weakref.WeakSet()
        self.pending = collections.deque()   # (graph id, connection token)

    def add(self, g):
        self.live.add(g)

    def discard(self, g):
        self.live.discard(g)

    def gone(self, gid, token):
        self.pending.append((gid, token))

    def drain(self, h):
        """Destroys the graphs collected since (their ids on this
        connection only: another's went with its session)."""
        c, pending = self._c, self.pending
        while pending:
            try:
                gid, token = pending.popleft()
            except IndexError:
                return
            if token is c._token:
                c._lib.opd_graph_destroy(h, gid)

    def close(self):
        """The client closes: every graph is gone with its session."""
        for g in list(self.live):
            g._forget()
        self.live = weakref.WeakSet()
        self.pending.clear()


def _host_array(x):
    """A C-contiguous numpy array of x (a torch tensor, array-like or
    Python number: float -> float32, int -> int64)."""
    import numpy as np
    if _is_torch(x):
        x = x.detach().cpu().contiguous().numpy()
    elif isinstance(x, bool):
        x = np.asarray(x)
    elif isinstance(x, numbers.Integral):
        x = np.asarray(x, np.int64)
    elif isinstance(x, numbers.Real):
        x = np.asarray(x, np.float32)
    return np.ascontiguousarray(x)
