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



# ---- data movement: views in torch, copies (or aliases) in an opd graph --

def _identity(n, mod):
    """Nodes that give their input's value in an opd graph: contiguous()
    (every graph value is contiguous), clone(), dropout outside training,
    .to() / .type_as() / .float() that change nothing."""
    x = n.args[0]
    name = n.target if n.op == "call_method" else getattr(n.target, "__name__", "")
    if mod is not None and isinstance(mod, nn.Dropout) and mod.training:
        raise Unsupported("dropout in training mode")
    if name == "dropout" and arg(n, 2, "training", True) and n.target is F.dropout:
        raise Unsupported("dropout in training mode")
    if name in ("to", "type", "type_as", "float"):
        a, b = meta(x), meta(n)
        if a is None or b is None or a.dtype != b.dtype or a.device != b.device:
            raise Unsupported(".%s changing dtype or device" % name)
    return "=", [x], {}


def _reshape(n, mod):
    """view / reshape / flatten / unsqueeze / squeeze: the output shape is
    the node's (static shapes), whatever the arguments said."""
    return "reshape", [n.args[0]], {"shape": [int(d) for d in meta(n).shape]}


def _expand(n, mod):
    return "expand", [n.args[0]], {"shape": [int(d) for d in meta(n).shape]}


def _permute(n, mod):
    x = n.args[0]
    rank = len(meta(x).shape)
    name = n.target if n.op == "call_method" else getattr(n.target, "__name__", "")
    if name in ("transpose", "swapaxes", "swapdims"):
        a, b = arg(n, 1, "dim0"), arg(n, 2, "dim1")
        dims = list(range(rank))
        dims[a % rank], dims[b % rank] = dims[b % rank], dims[a % rank]
    elif name == "t":
        dims = [1, 0] if rank == 2 else list(range(rank))
    else:
        dims = list(n.args[1:]) if len(n.args) > 1 else list(n.kwargs.get("dims", ()))
        if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
            dims = list(dims[0])
        dims = [d % rank for d in dims]
    return "permute", [x], {"dims": dims}


def _narrow(n, mod):
    x, dim, start, length = n.args[0], arg(n, 1, "dim"), arg(n, 2, "start"), \
        arg(n, 3, "length")
    if not all(isinstance(v, int) for v in (dim, start, length)):
        raise Unsupported("narrow with a tensor start")
    size = meta(x).shape[dim]
    start %= size if start < 0 else size + 1
    return "slice", [x], {"dim": dim, "start": start, "end": start + length,
                          "step": 1}


def _getitem(n, mod):
    """x[...] with slices of one dim (steps included) as opd's slice."""
    x, idx = n.args[0], n.args[1]
    if meta(x) is None:
        raise Unsupported("getitem of a non-tensor")
    idx = idx if isinstance(idx, tuple) else (idx,)
    rank = len(meta(x).shape)
    if any(not isinstance(i, slice) and i is not Ellipsis for i in idx):
        raise Unsupported("indexing with %s: opd takes slices" %
                          ", ".join(type(i).__name__ for i in idx))
    if idx.count(Ellipsis) > 1:
        raise Unsupported("two ellipses")
    if Ellipsis in idx:
        k = idx.index(Ellipsis)
        idx = idx[:k] + (slice(None),) * (rank - len(idx) + 1) + idx[k + 1:]
    cut = [(d, s) for d, s in enumerate(idx) if s != slice(None)]
    if not cut:
        return "=", [x], {}
    if len(cut) > 1:
        raise Unsupported("slices of %d dims: opd's slice takes one" % len(cut))
    d, s = cut[0]
    if not all(v is None or isinstance(v, int) for v in (s.start, s.stop, s.step)):
        raise Unsupported("a slice with tensor bounds")
    attrs = {"dim": d, "start": s.start or 0, "step": s.step or 1}
    if s.stop is not None:
        attrs["end"] = s.stop
    return "slice", [x], attrs


def _cat(n, mod):
    xs = n.args[0] if n.args else n.kwargs.get("tensors")
    if not isinstance(xs, (list, tuple)) or not xs:
        raise Unsupported("cat of no list")
    if len(xs) > 15:
        raise Unsupported("cat of %d tensors: opd's cat takes up to 15" % len(xs))
    return "cat", list(xs), {"dim": arg(n, 1, "dim", 0)}


def _embedding(n, mod):
    if mod is not None:
        if mod.max_norm is not None:
            raise Unsupported("embedding with max_norm")
        return "embedding", [mod.weight, n.args[0]], {}
    if arg(n, 3, "max_norm") is not None:
        raise Unsupported("embedding with max_norm")
    return "embedding", [arg(n, 1, "weight"), n.args[0]], {}


def _sdpa(n, mod):
    q, k, v = n.args[0], arg(n, 1, "key"), arg(n, 2, "value")
    mask = arg(n, 3, "attn_mask")
    if arg(n, 4, "dropout_p", 0.0) not in (0, 0.0):
        raise Unsupported("attention dropout")
    if n.kwargs.get("enable_gqa", False):
        raise Unsupported("grouped-query attention (enable_gqa)")
    causal = bool(arg(n, 5, "is_causal", False))
    scale = arg(n, 6, "scale")
    if mask is not None and causal:
        raise Unsupported("a mask and is_causal together")
    if scale is not None and not isinstance(scale, (int, float)):
        raise Unsupported("a tensor scale")
    return "sdpa", [q, k, v] + ([mask] if mask is not None else []), \
        {"causal": causal, "scale": float(scale or 0.0)}


def _addmm(n, mod):
    """torch.addmm(bias, x, w) (transformers' Conv1D): x @ w + bias."""
    if arg(n, 3, "beta", 1) != 1 or arg(n, 4, "alpha", 1) != 1:
        raise Unsupported("addmm with beta or alpha")
    return "addmm", [n.args[1], n.args[2], n.args[0]], {}


def _pow(n, mod):
    e = arg(n, 1, "exponent")
    if not isinstance(e, (int, float)) or float(e) not in (1.0, 2.0, 3.0, 4.0):
        raise Unsupported("pow with exponent %r: opd multiplies for 1..4" % (e,))
    return "pow", [n.args[0]], {"n": int(e)}


# pseudo ops: what each needs of the daemon (the rest are daemon ops)
PSEUDO = {"=": (), "addmm": ("linear",), "pow": ("mul",)}
# ops that move data of any dtype (the rest compute in float32)
MOVES = {"=", "reshape", "expand", "permute", "slice", "cat"}

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
        ((torch.gru_cell, nn.GRUCell), _gru_cell),
        (("contiguous", "clone", "detach", "to", "type", "type_as", "float", F.dropout,
          nn.Dropout, torch.clone, torch.detach), _identity),
        (("view", "reshape", "flatten", "unsqueeze", "squeeze", "unflatten",
          torch.reshape, torch.flatten, torch.unsqueeze, torch.squeeze),
         _reshape),
        (("expand", "expand_as"), _expand),
        (("transpose", "permute", "t", "swapaxes", "swapdims", torch.transpose,
          torch.permute, torch.t, torch.swapaxes), _permute),
        ((torch.narrow, "narrow"), _narrow),
        ((operator.getitem,), _getitem),
        ((torch.cat, torch.concat), _cat),
        ((F.embedding, nn.Embedding), _embedding),
        ((getattr(F, "scaled_dot_product_attention", _sdpa),), _sdpa),
        ((torch.addmm,), _addmm),
        ((torch.pow, operator.pow, "pow"), _pow)):
    for _k in _keys:
        RULES[_k] = _rule
for _k in (getattr(F, "rms_norm", None), getattr(torch, "rms_norm", None)):
    if _k is not None:
        RULES[_k] = _rms_norm
if hasattr(nn, "RMSNorm"):
    RULES[nn.RMSNorm] = _rms_norm
del _keys, _rule, _k

DTYPES = {torch.float32, torch.float16, torch.bfloat16, torch.float64,
          torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool}

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
    out = meta(node)
    if out is None:
        raise Unsupported("its output is not one tensor")
    op, ins, attrs = rule(node, mod)
    need = PSEUDO.get(op, (op,))
    if op == "addmm" and not (isinstance(ins[1], torch.Tensor) or _static(ins[1])):
        need = ("matmul", "add")       # a weight that is not a constant
    if any(o not in ops for o in need) and \
            not (op == "linear" and "matmul" in ops and "add" in ops):
        raise Unsupported("the daemon has no %s op" % "/".join(
            o for o in need if o not in ops))
    if out.requires_grad:
        raise Unsupported("its output needs autograd: opd graphs run forward "
                          "only (call under torch.no_grad() or "
                          "torch.inference_mode())")
    dev = None
    for k, x in enumerate([out] + [meta(i) if not isinstance(i, torch.Tensor)
                                   else i for i in ins]):
        if x is None:
            continue
        if op in MOVES or (op == "embedding" and k == 2) or (
                op == "sdpa" and k == 4 and x.dtype == torch.bool):
            if x.dtype not in DTYPES:
                raise Unsupported("dtype %s" % str(x.dtype).replace("torch.", ""))
        elif x.dtype != torch.float32:
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
