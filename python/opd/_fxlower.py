"""opd._fxlower: which torch.fx nodes an opd graph runs, and how (the
support table of the torch.compile backend, opd.dynamo).

DESIGN
One table, RULES, maps what a node calls (a call_function target, a
call_method name, a call_module's module type) to a rule; a rule reads
the node's arguments (positional or keyword, as torch's signatures name
them) and returns the opd op, its inputs (FX nodes or Python numbers) and
its attributes, or raises Unsupported with the reason the node stays in
torch. spec() adds the checks every node shares: the op is one the daemon
lists (so an op added to the daemon later is picked up, and one it lacks
falls back), every tensor is float32 with a static shape, on the CPU or
on a CUDA device the daemon has, and the output is one tensor that
needs no autograd (opd graphs run forward only: a node whose output
requires grad stays torch's, so training still differentiates). The same
spec() serves the partitioner's question (is this node supported?) on the
dynamo graph and the emission of the node into an opd graph (Part, on
the fused submodule's copy of it, _fxgraph.py), where a relu / gelu / silu that is a
linear's only user is fused into the linear's `act`. Without a `linear`
op in the daemon, a linear whose weight is a constant becomes matmul
with the weight transposed once (a constant) plus add. torch.gru_cell
(nn.GRUCell's call) is opd's gru_cell where the daemon has it.
"""
import operator

import torch
import torch.nn.functional as F

nn = torch.nn


class Unsupported(Exception):
    """The node stays in torch; str() is the reason."""


def arg(node, i, name, default=None):
    """The node's argument i (positional) or `name` (keyword)."""
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def _unary(op):
    def rule(n, mod):
        if arg(n, 1, "inplace", False) is True:
            raise Unsupported("in-place %s: opd graph values are not torch's" % op)
        return op, [n.args[0]], {}
    return rule


def _gelu(n, mod):
    approx = mod.approximate if mod is not None else arg(n, 1, "approximate", "none")
    if approx not in ("none", "tanh"):
        raise Unsupported("gelu approximate=%r" % (approx,))
    return "gelu", [n.args[0]], {"approximate": approx}


def _softmax(n, mod):
    x = n.args[0]
    dim = mod.dim if mod is not None else arg(n, 1, "dim")
    # F.softmax(input, dim, _stacklevel, dtype); torch.softmax and the
    # method: (input, dim, dtype)
    dtype = None if mod is not None else arg(n, 3 if n.target is F.softmax
                                              else 2, "dtype")
    if dtype is not None:
        raise Unsupported("softmax with a dtype")
    rank = len(meta(x).shape)
    if dim is None or dim not in (-1, rank - 1):
        raise Unsupported("softmax over dim %s: opd softmax takes the last dim"
                          % (dim,))
    return "softmax", [x], {}


def _last_dim_only(name, x, shape):
    shape = tuple(shape) if isinstance(shape, (tuple, list, torch.Size)) else (shape,)
    if len(shape) != 1 or shape[0] != meta(x).shape[-1]:
        raise Unsupported("%s over %s: opd %s normalizes the last dim"
                          % (name, shape, name.replace("_", "")))


def _layer_norm(n, mod):
    x = n.args[0]
    if mod is not None:
        shape, w, b, eps = mod.normalized_shape, mod.weight, mod.bias, mod.eps
    else:
        shape, w, b = arg(n, 1, "normalized_shape"), arg(n, 2, "weight"), \
            arg(n, 3, "bias")
        eps = arg(n, 4, "eps", 1e-5)
    _last_dim_only("layer_norm", x, shape)
    if w is None and b is not None:
        raise Unsupported("layer_norm with a bias and no weight")
    return "layernorm", [x, w, b], {"eps": float(eps)}


def _rms_norm(n, mod):
    x = n.args[0]
    if mod is not None:
        shape, w, eps = mod.normalized_shape, mod.weight, mod.eps
    else:
        shape, w, eps = arg(n, 1, "normalized_shape"), arg(n, 2, "weight"), \
            arg(n, 3, "eps")
    _last_dim_only("rms_norm", x, shape)
    return "rmsnorm", [x, w], {} if eps is None else {"eps": float(eps)}


def _linear(n, mod):
    if mod is not None:
        return "linear", [n.args[0], mod.weight, mod.bias], {}
    return "linear", [n.args[0], arg(n, 1, "weight"), arg(n, 2, "bias")], {}


def _binary(op):
    def rule(n, mod):
        a, b = n.args[0], arg(n, 1, "other")
        if arg(n, 2, "alpha", 1) != 1:
            raise Unsupported("%s with alpha" % op)
        if arg(n, 2, "rounding_mode") is not None:
            raise Unsupported("div with rounding_mode")
        if not _is_tensor(a) and not _is_tensor(b):
            raise Unsupported("%s of two numbers" % op)
        for x in (a, b):
            if not _is_tensor(x) and not isinstance(x, (int, float)):
                raise Unsupported("%s of %s" % (op, type(x).__name__))
        return op, [a, b], {}
    return rule


def _matmul(n, mod):
    a, b = n.args[0], n.args[1]
    sa, sb = meta(a).shape, meta(b).shape
    if len(sa) < 2 or len(sb) < 2:
        raise Unsupported("matmul of a vector: opd matmul takes (..., M, K) "
                          "and (..., K, N)")
    if len(sb) > 2 and tuple(sa[:-2]) != tuple(sb[:-2]):
        raise Unsupported("matmul broadcasting batch dims %s and %s"
                          % (tuple(sa), tuple(sb)))
    return "matmul", [a, b], {}


def _gru_cell(n, mod):
    if mod is not None:
        x, h = n.args[0], arg(n, 1, "hx")
        ins = [x, h, mod.weight_ih, mod.weight_hh, mod.bias_ih, mod.bias_hh]
    else:
        ins = [n.args[0], n.args[1], n.args[2], n.args[3],
               arg(n, 4, "b_ih"), arg(n, 5, "b_hh")]
    if ins[1] is None:
        raise Unsupported("gru_cell without a hidden state")
    if len(meta(ins[0]).shape) != 2:
        raise Unsupported("gru_cell of an unbatched input")
    if ins[4] is None and ins[5] is not None:
        raise Unsupported("gru_cell with b_hh and no b_ih")
    return "gru_cell", ins, {}


RULES = {}
for _keys, _rule in (
        ((F.linear, torch._C._nn.linear, nn.Linear), _linear),
        ((F.relu, torch.relu, "relu", nn.ReLU), _unary("relu")),
        ((F.silu, "silu", nn.SiLU), _unary("silu")),
        ((torch.sigmoid, F.sigmoid, "sigmoid", nn.Sigmoid), _unary("sigmoid")),
        ((torch.tanh, F.tanh, "tanh", nn.Tanh), _unary("tanh")),
        ((F.gelu, "gelu", nn.GELU), _gelu),
        ((F.softmax, torch.softmax, "softmax", nn.Softmax), _softmax),
        ((F.layer_norm, torch.layer_norm, nn.LayerNorm), _layer_norm),
        ((operator.add, torch.add, "add"), _binary("add")),
        ((operator.sub, torch.sub, "sub"), _binary("sub")),
        ((operator.mul, torch.mul, "mul"), _binary("mul")),
        ((operator.truediv, torch.div, "div", torch.true_divide), _binary("div")),
        ((operator.matmul, torch.matmul, torch.mm, torch.bmm, "matmul"), _matmul),
        ((torch.gru_cell, nn.GRUCell), _gru_cell)):
    for _k in _keys:
        RULES[_k] = _rule
for _k in (getattr(F, "rms_norm", None), getattr(torch, "rms_norm", None)):
    if _k is not None:
        RULES[_k] = _rms_norm
if hasattr(nn, "RMSNorm"):
    RULES[nn.RMSNorm] = _rms_norm
del _keys, _rule, _k

ACTS = {"relu": "relu", "silu": "silu"}    # op -> linear's act (gelu: below)


def meta(x):
    """The example (fake) tensor of FX node x, or None."""
    m = getattr(x, "meta", None)
    if m is None:
        return None
    v = m.get("example_value", m.get("val"))
    return v if isinstance(v, torch.Tensor) else None


def _is_tensor(x):
    return isinstance(x, torch.Tensor) or meta(x) is not None


def what(node):
    """A short name of what the node calls, for the fallback log."""
    t = node.target
    if node.op == "call_method":
        return "Tensor.%s" % t
    if node.op == "call_module":
        return "%s (%s)" % (t, type(node.graph.owning_module.get_submodule(t)).__name__)
    mod = getattr(t, "__module__", None) or ""
    name = getattr(t, "__name__", str(t))
    mod = {"torch._C._nn": "torch.nn.functional", "_operator": "operator"}.get(mod, mod)
    return "%s.%s" % (mod, name) if mod else name


def _key(node):
    if node.op == "call_module":
        mod = node.graph.owning_module.get_submodule(node.target)
        return type(mod), mod
    if node.op in ("call_function", "call_method"):
        return node.target, None
    return None, None


def spec(node, ops, devices):
    """(opd op, inputs, attrs) of the node, or raises Unsupported. ops: the
    daemon's op names; devices: the daemon's CUDA devices ("cuda:N")."""
    key, mod = _key(node)
    if key is None:
        raise Unsupported("a %s node" % node.op)
    try:
        rule = RULES.get(key)
    except TypeError:               # an unhashable target
        rule = None
    if rule is None:
        raise Unsupported("no opd op")
    if node.kwargs.get("out") is not None:
        raise Unsupported("an out= tensor")
    op, ins, attrs = rule(node, mod)
    if op not in ops and not (op == "linear" and "matmul" in ops and "add" in ops):
        raise Unsupported("the daemon has no %s op" % op)
    out = meta(node)
    if out is None:
        raise Unsupported("its output is not one tensor")
    if out.requires_grad:
        raise Unsupported("its output needs autograd: opd graphs run forward "
                          "only (call under torch.no_grad() or "
                          "torch.inference_mode())")
    dev = None
    for x in [out] + [meta(i) if not isinstance(i, torch.Tensor) else i
                      for i in ins]:
        if x is None:
            continue
        if x.dtype != torch.float32:
            raise Unsupported("dtype %s: the opd backend takes float32"
                              % str(x.dtype).replace("torch.", ""))
        if not all(isinstance(d, int) for d in x.shape):
            raise Unsupported("symbolic shape %s: opd graphs have static "
                              "shapes (torch.compile(..., dynamic=False))"
                              % (tuple(x.shape),))
        d = str(x.device) if x.device.type == "cpu" else "cuda:%d" % (
            x.device.index or 0)
        if dev is not None and d != dev:
            raise Unsupported("tensors on %s and %s" % (dev, d))
        dev = d
    if dev != "cpu" and dev not in devices:
        raise Unsupported("a tensor on %s, a device the daemon does not have"
                          % dev)
    if op == "linear" and "linear" not in ops:
        if not isinstance(ins[1], torch.Tensor) and not _static(ins[1]):
            raise Unsupported("the daemon has no linear op and the weight is "
                              "not a parameter")
        if len(meta(ins[0]).shape) < 2:
            raise Unsupported("linear of a vector (no linear op: as matmul)")
    return op, ins, attrs


def _static(x):
    return getattr(x, "meta", {}).get("opd_const", False)


def fused_act(node, ops, devices):
    """The linear `act` a lone user of linear node `node` folds into
    (with that user), else (None, None)."""
    users = list(node.users)
    if "linear" not in ops or len(users) != 1:
        return None, None
    try:
        op, ins, attrs = spec(users[0], ops, devices)
    except Unsupported:
        return None, None
    if ins[0] is not node or len(ins) != 1:
        return None, None
    if op == "gelu":
        return ("gelu" if attrs["approximate"] == "none" else "gelu_tanh"), users[0]
    act = ACTS.get(op)
    return (act, users[0]) if act else (None, None)
