"""mlp.py: the trading model of examples/hft_server for Python clients: the
same arithmetic as mlp.h (weights from a seed, their layout in one arena,
market events, the node list), the function that defines the model as one
opd graph, and a numpy reference.

DESIGN
mlp.h is the model's definition; this file computes the same values bit
for bit in numpy (splitmix64 on uint64 arrays, the bound in double, one
rounding to float32), so that a Python client checks the daemon's answers
against weights rebuilt from the seed the C publisher put in the meta,
and bench/bench_graph.py runs torch on exactly the weights opd runs.
The node list has the same two forms: three `linear` nodes when the daemon
has that op, else matmul + add + relu on the transposed problem (xT (256, B)
-> (1, B); at B = 1 the same bytes as x (1, 256)).
"""
import numpy as np

IN, HID, OUT = 256, 512, 1
# name, rows, cols (0: a bias), fan_in: torch's nn.Linear layout
PARAMS = (("w1", HID, IN, IN), ("b1", HID, 0, IN), ("w2", HID, HID, HID),
          ("b2", HID, 0, HID), ("w3", OUT, HID, HID), ("b3", OUT, 0, HID))
X, FIRST_NODE = 0, 1 + len(PARAMS)


def layout():
    """Returns ([(name, rows, cols, fan_in, byte offset, count)], bytes):
    each parameter at a 64-byte aligned offset, as mlp_layout."""
    out, off = [], 0
    for name, rows, cols, fan_in in PARAMS:
        count = rows * (cols or 1)
        out.append((name, rows, cols, fan_in, off, count))
        off = (off + count * 4 + 63) & ~63
    return out, off


def _mix(z):
    """splitmix64's finalizer on a uint64 array (wrapping arithmetic)."""
    u = np.uint64
    with np.errstate(over="ignore"):
        z = z + u(0x9E3779B97F4A7C15)
        z = (z ^ (z >> u(30))) * u(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> u(27))) * u(0x94D049BB133111EB)
    return z ^ (z >> u(31))


def _unit(keys):
    return (_mix(keys) >> np.uint64(40)).astype(np.float64) / 16777216.0


def weights(seed):
    """Returns {name: float32 array in torch layout} for `seed`, equal bit
    for bit to what mlp_fill writes."""
    out = {}
    for k, (name, rows, cols, fan_in, _, count) in enumerate(layout()[0]):
        key = np.uint64((seed << 40) ^ (k << 32))
        vals = (2.0 * _unit(key ^ np.arange(count, dtype=np.uint64)) - 1.0) \
            * (1.0 / np.sqrt(float(fan_in)))
        out[name] = vals.astype(np.float32).reshape((rows, cols) if cols else (rows,))
    return out


def pack(w):
    """Returns the weights as one float32 array laid out as mlp_layout (the
    bytes of one arena)."""
    lay, nbytes = layout()
    flat = np.zeros(nbytes // 4, np.float32)
    for name, _, _, _, off, count in lay:
        flat[off // 4:off // 4 + count] = w[name].ravel()
    return flat


def events(stream, first, n):
    """Market events first .. first+n-1 of `stream`: (n, 256) float32 in
    [-1, 1), as mlp_event_value."""
    r = np.arange(first, first + n, dtype=np.uint64)[:, None]
    j = np.arange(IN, dtype=np.uint64)[None, :]
    key = np.uint64((0x80000000 | stream) << 32) ^ (r << np.uint64(8)) ^ j
    return (2.0 * _unit(key) - 1.0).astype(np.float32)


def nodes(linear, batch):
    """The model as [(op, [value ids], act or None, out shape)] and the
    input's declared shape (value ids as in mlp.h: 0 the input, 1..6 the
    parameters, then each node's output)."""
    out, v, h = [], FIRST_NODE, X
    if linear:
        for l in range(3):
            out.append(("linear", [h, 1 + 2 * l, 2 + 2 * l], "relu" if l < 2 else None,
                        (batch, HID if l < 2 else OUT)))
            h, v = v, v + 1
        return out, (batch, IN)
    for l in range(3):
        rows = HID if l < 2 else OUT
        out.append(("matmul", [1 + 2 * l, h], None, (rows, batch)))
        out.append(("add", [v, 2 + 2 * l], None, (rows, batch)))
        h, v = v + 1, v + 2
        if l < 2:
            out.append(("relu", [h], None, (rows, batch)))
            h, v = v, v + 1
    return out, (IN, batch)


def param_tensors(t, linear):
    """Typed views of the parameters in tensor t (an attached publication,
    or any opd Tensor holding mlp_layout's bytes): [w1, b1, ..., b3], a
    bias (N) for the linear form, (N, 1) for the matmul form."""
    import opd
    out = []
    for _, rows, cols, _, off, _ in layout()[0]:
        shape = (rows, cols) if cols else ((rows,) if linear else (rows, 1))
        out.append(opd.Tensor(t.arena, t.offset + off, "float32", shape, None, t._mem))
    return out


def has_linear(c):
    """True when the daemon lists the op `linear`."""
    return "linear" in c.ops()


def define(c, params, batch, linear, device="cpu"):
    """Defines the model as one graph on `device` over params (the list
    param_tensors returns) for `batch`; returns the graph (g.run(x, out=y))."""
    nl, xshape = nodes(linear, batch)
    with c.graph(device=device, name="hft_mlp") as g:
        vals = [g.input("x", xshape, "float32")]
        vals += [g.const(t, name=p[0]) for t, p in zip(params, PARAMS)]
        for op, ins, act, _ in nl:
            kw = {"act": act} if act else {}
            vals.append(getattr(g, op)(*[vals[i] for i in ins], **kw))
        g.output(vals[-1])
    return g


def x_layout(ev, linear):
    """The input tensor's contents for events ev (B, 256) in the form's
    layout: ev itself, or ev.T for the matmul form."""
    return ev if linear else np.ascontiguousarray(ev.T)


def reference(w, ev):
    """The model on events ev (B, 256) in float64: (B, 1)."""
    h = np.maximum(ev.astype(np.float64) @ w["w1"].T.astype(np.float64) + w["b1"], 0)
    h = np.maximum(h @ w["w2"].T.astype(np.float64) + w["b2"], 0)
    return h @ w["w3"].T.astype(np.float64) + w["b3"]


def error(got, want):
    """max |got - want| / (1e-4 + 1e-3 |want|): <= 1 is a match (mlp_error)."""
    got = np.asarray(got, np.float64).reshape(-1)
    want = np.asarray(want, np.float64).reshape(-1)
    e = np.abs(got - want) / (1e-4 + 1e-3 * np.abs(want))
    return float(np.nan_to_num(e, nan=np.inf).max())
