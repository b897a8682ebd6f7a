"""opd._fxrules: the support table of the torch.compile backend: which
torch.fx nodes an opd graph runs, and as what (opd._fxlower applies it).

DESIGN
One table, RULES, maps what a node calls (a call_function target, a
call_method name, a call_module's module type) to a rule; a rule reads
the node's arguments (positional or keyword, as torch's signatures name
them) and returns the opd op, its inputs (FX nodes, parameters or Python
numbers) and its attributes, or raises Unsupported with the reason the
node stays in torch. Views (view, reshape, transpose, permute, narrow,
slices, expand) become opd's data movement ops, which copy (a reshape of
an intermediate shares its memory in a graph: OPD_OPF_VIEW); nodes that
change nothing in a graph of contiguous values (contiguous, clone,
dropout outside training, a .to() to the same dtype and device) are the
pseudo op "=", and more pseudo ops are built from daemon ops at
emission (_fxgraph.py; PSEUDO names what each needs): addmm
(transformers' Conv1D: linear with the weight transposed once), pow with
a small integer exponent (muls), select / slices (slices and a reshape),
roll (slices and a cat), pad (cats of constant blocks) and take
(x[index]: an embedding of x's rows, _fxindex.py).
"""
import operator

import math
import numbers

import torch
import torch.nn.functional as F

from ._fxbase import Unsupported, _is_tensor, _static, arg, meta  # noqa: F401
from ._fxindex import INDEX_MOVES, INDEX_RULES, _take

nn = torch.nn


def _unary(op):
    def rule(n, mod):
        if arg(n, 1, "inplace", False) is True:
            raise Unsupported("in-place %s: opd graph values are not torch's" % op)
        return op, [n.args[0]], {}
    return rule


def _hardtanh(n, mod):
    """F.hardtanh, F.relu6 (0, 6), their modules and torch.clamp/clip with
    number bounds (a missing one is infinite): the hardtanh op."""
    if mod is not None:
        inplace, lo, hi = getattr(mod, "inplace", False), mod.min_val, mod.max_val
    elif n.target is F.relu6:
        inplace, lo, hi = arg(n, 1, "inplace", False), 0.0, 6.0
    elif n.target is F.hardtanh:
        inplace = arg(n, 3, "inplace", False)
        lo, hi = arg(n, 1, "min_val", -1.0), arg(n, 2, "max_val", 1.0)
    else:                                  # clamp / clip
        inplace = False
        lo, hi = arg(n, 1, "min"), arg(n, 2, "max")
        lo = -math.inf if lo is None else lo
        hi = math.inf if hi is None else hi
    if inplace is True:
        raise Unsupported("in-place hardtanh: opd graph values are not torch's")
    if not all(isinstance(v, numbers.Real) and not isinstance(v, bool)
               for v in (lo, hi)):
        raise Unsupported("clamp with tensor bounds")
    return "hardtanh", [n.args[0]], {"min_val": float(lo), "max_val": float(hi)}


def _gelu(n, mod):
    approx = mod.approximate if mod is not None else arg(n, 1, "approximate", "none")
    if approx not in ("none", "tanh"):
        raise Unsupported("gelu approximate=%r" % (approx,))
    return "gelu", [n.args[0]], {"approximate": approx}


def _softmax(n, mod, op="softmax"):
    x = n.args[0]
    dim = mod.dim if mod is not None else arg(n, 1, "dim")
    # F.softmax(input, dim, _stacklevel, dtype); torch.softmax and the
    # method: (input, dim, dtype)
    fn = getattr(F, op)
    dtype = None if mod is not None else arg(n, 3 if n.target is fn else 2, "dtype")
    if dtype not in (None, torch.float32):
        raise Unsupported("%s with dtype %s" % (op, str(dtype).replace("torch.", "")))
    if dim is None:
        raise Unsupported("%s without a dim" % op)
    return op, [x], {"dim": int(dim)}


def _log_softmax(n, mod):
    return _softmax(n, mod, "log_softmax")


def _trailing(name, x, shape):
    """The number of trailing dims of x that normalized_shape covers."""
    shape = tuple(shape) if isinstance(shape, (tuple, list, torch.Size)) else (shape,)
    xs = tuple(meta(x).shape)
    if not shape or len(shape) > len(xs) or xs[len(xs) - len(shape):] != shape:
        raise Unsupported("%s over %s of a tensor %s" % (name, shape, xs))
    return len(shape)


def _layer_norm(n, mod):
    x = n.args[0]
    if mod is not None:
        shape, w, b, eps = mod.normalized_shape, mod.weight, mod.bias, mod.eps
    else:
        shape, w, b = arg(n, 1, "normalized_shape"), arg(n, 2, "weight"), \
            arg(n, 3, "bias")
        eps = arg(n, 4, "eps", 1e-5)
    k = _trailing("layer_norm", x, shape)
    if w is None and b is not None:
        raise Unsupported("layer_norm with a bias and no weight")
    return "layernorm", [x, w, b], {"eps": float(eps), "ndims": k}


def _rms_norm(n, mod):
    x = n.args[0]
    if mod is not None:
        shape, w, eps = mod.normalized_shape, mod.weight, mod.eps
    else:
        shape, w, eps = arg(n, 1, "normalized_shape"), arg(n, 2, "weight"), \
            arg(n, 3, "eps")
    k = _trailing("rms_norm", x, shape)
    attrs = {"ndims": k}
    if eps is not None:
        attrs["eps"] = float(eps)
    return "rmsnorm", [x, w], attrs


def _linear(n, mod):
    if mod is not None:
        return "linear", [n.args[0], mod.weight, mod.bias], {}
    return "linear", [n.args[0], arg(n, 1, "weight"), arg(n, 2, "bias")], {}


def _binary(op):
    def rule(n, mod):
        a, b = n.args[0], arg(n, 1, "other")
        alpha = n.kwargs.get("alpha", 1)
        if alpha != 1 and (op not in ("add", "sub") or
                           not isinstance(alpha, (int, float))):
            raise Unsupported("%s with alpha" % op)
        if arg(n, 2, "rounding_mode") is not None:
            raise Unsupported("div with rounding_mode")
        if not _is_tensor(a) and not _is_tensor(b):
            raise Unsupported("%s of two numbers" % op)
        for x in (a, b):
            if not _is_tensor(x) and not isinstance(x, (int, float)):
                raise Unsupported("%s of %s" % (op, type(x).__name__))
        out = meta(n)
        if out is not None and out.dtype in INTS and op != "div":
            # integer arithmetic: a number as a constant of the result's
            # dtype (torch's promotion keeps an int tensor's dtype for an int)
            a, b = (torch.tensor(x, dtype=out.dtype, device=out.device)
                    if isinstance(x, int) and not isinstance(x, bool) else x for x in (a, b))
        return op, [a, b], {} if alpha == 1 else {"alpha": float(alpha)}
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
    """x[...] with slices of one dim (steps included) as opd's slice; an
    int index of one dim as a slice of one and a reshape ("select")."""
    x, idx = n.args[0], n.args[1]
    if meta(x) is None:
        raise Unsupported("getitem of a non-tensor")
    idx = idx if isinstance(idx, tuple) else (idx,)
    rank = len(meta(x).shape)
    if None in idx and all(i is None or i == slice(None) or i is Ellipsis
                           for i in idx):    # x[:, None]: new dims, a reshape
        return "reshape", [x], {"shape": [int(d) for d in meta(n).shape]}
    if len(idx) == 1 and meta(idx[0]) is not None:     # x[index]: rows by index
        return _take(n, x, idx[0])
    if any(not isinstance(i, (slice, int)) or isinstance(i, bool)
           for i in idx if i is not Ellipsis):
        raise Unsupported("indexing with %s: opd takes slices and ints" %
                          ", ".join(type(i).__name__ for i in idx))
    if idx.count(Ellipsis) > 1:
        raise Unsupported("two ellipses")
    if Ellipsis in idx:
        k = idx.index(Ellipsis)
        idx = idx[:k] + (slice(None),) * (rank - len(idx) + 1) + idx[k + 1:]
    cut = [(d, s) for d, s in enumerate(idx) if s != slice(None)]
    if not cut:
        return "=", [x], {}
    if len(cut) > 1:                        # one slice node per dim (_fxgraph)
        return "slices", [x], {"cuts": [_cut(meta(x), d, s) for d, s in cut],
                               "shape": [int(v) for v in meta(n).shape]}
    d, s = cut[0]
    if isinstance(s, int):                  # x[:, i]: a slice of one, that dim dropped
        size = int(meta(x).shape[d])
        if not -size <= s < size:
            raise Unsupported("index %d of a dim of %d" % (s, size))
        s = s % size
        return "select", [x], {"dim": d, "start": s, "end": s + 1, "step": 1,
                               "shape": [int(v) for v in meta(n).shape]}
    if not all(v is None or isinstance(v, int) for v in (s.start, s.stop, s.step)):
        raise Unsupported("a slice with tensor bounds")
    attrs = {"dim": d, "start": s.start or 0, "step": s.step or 1}
    if s.stop is not None:
        attrs["end"] = s.stop
    return "slice", [x], attrs


def _cut(x, d, s):
    """(dim, start, end or None, step) of index s (a slice or an int) of
    dim d of example tensor x, for one slice node."""
    if isinstance(s, int):
        size = int(x.shape[d])
        if not -size <= s < size:
            raise Unsupported("index %d of a dim of %d" % (s, size))
        return (d, s % size, s % size + 1, 1)
    if not all(v is None or isinstance(v, int) for v in (s.start, s.stop, s.step)):
        raise Unsupported("a slice with tensor bounds")
    return (d, s.start or 0, s.stop, s.step or 1)


def _roll(n, mod):
    """torch.roll over given dims: per dim a cat of its last `shift`
    elements and the rest (two slices and a cat, _fxgraph)."""
    x, shifts, dims = n.args[0], arg(n, 1, "shifts"), arg(n, 2, "dims")
    if dims is None or (isinstance(dims, (tuple, list)) and not dims):
        raise Unsupported("roll of the flattened tensor (no dims)")
    shifts = shifts if isinstance(shifts, (tuple, list)) else (shifts,)
    dims = dims if isinstance(dims, (tuple, list)) else (dims,)
    if len(shifts) != len(dims) or not all(isinstance(v, int) for v in (*shifts, *dims)):
        raise Unsupported("roll with shifts %r over dims %r" % (shifts, dims))
    shape = meta(x).shape
    rolls = [(d % len(shape), k % int(shape[d])) for k, d in zip(shifts, dims)
             if int(shape[d]) and k % int(shape[d])]
    if not rolls:
        return "=", [x], {}
    return "roll", [x], {"rolls": rolls, "sizes": [int(shape[d]) for d, _ in rolls]}


def _pad(n, mod):
    """F.pad in constant mode: by nothing (Swin's window padding when the
    size divides) x itself; else per padded dim a cat with constant blocks
    of the value (a negative pad: a slice), the pseudo op "pad"."""
    pad, mode = arg(n, 1, "pad"), arg(n, 2, "mode", "constant")
    value = arg(n, 3, "value")
    if mode != "constant":
        raise Unsupported("pad in %r mode: opd pads with a constant" % (mode,))
    if not isinstance(pad, (tuple, list)) or len(pad) % 2 or \
            not all(isinstance(p, int) for p in pad):
        raise Unsupported("pad by %r" % (pad,))
    if value is not None and not isinstance(value, (int, float)):
        raise Unsupported("pad with a tensor value")
    if all(p == 0 for p in pad):
        return "=", [n.args[0]], {}
    x = meta(n.args[0])
    pads = [(x.dim() - 1 - i // 2, pad[i], pad[i + 1]) for i in range(0, len(pad), 2)
            if pad[i] or pad[i + 1]]
    return "pad", [n.args[0]], {"pads": pads, "value": float(value or 0),
                                "shape": [int(d) for d in x.shape]}


def _cat(n, mod):
    xs = n.args[0] if n.args else n.kwargs.get("tensors")
    if not isinstance(xs, (list, tuple)) or not xs:
        raise Unsupported("cat of no list")
    # more than 15 (a node's inputs): a chain of cats (_fxgraph)
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


def _reduce(op):
    def rule(n, mod):
        x = n.args[0]
        dim = arg(n, 1, "dim")
        keep = arg(n, 2, "keepdim", False)
        if n.kwargs.get("dtype") is not None:
            raise Unsupported("%s with a dtype" % op)
        attrs = {"keepdim": bool(keep)}
        if dim is not None:
            dims = [dim] if isinstance(dim, int) else list(dim)
            if not dims or not all(isinstance(d, int) for d in dims):
                raise Unsupported("%s over dims %r" % (op, dim))
            attrs["dims"] = dims
        return op, [x], attrs
    return rule


def _pair(v):
    return [int(v)] if isinstance(v, int) else [int(d) for d in v]


def _max_pool2d(n, mod):
    if mod is not None:
        k, st, pad, dil, ceil = (mod.kernel_size, mod.stride, mod.padding,
                                 mod.dilation, mod.ceil_mode)
        if mod.return_indices:
            raise Unsupported("max_pool2d with return_indices")
    else:
        k, st, pad = arg(n, 1, "kernel_size"), arg(n, 2, "stride"), arg(n, 3, "padding", 0)
        dil, ceil = arg(n, 4, "dilation", 1), arg(n, 5, "ceil_mode", False)
        if arg(n, 6, "return_indices", False):
            raise Unsupported("max_pool2d with return_indices")
    attrs = {"kernel": _pair(k), "padding": _pair(pad), "dilation": _pair(dil),
             "ceil_mode": bool(ceil)}
    if st is not None and st != []:
        attrs["stride"] = _pair(st)
    return "max_pool2d", [n.args[0]], attrs


def _adaptive_avg_pool2d(n, mod):
    size = mod.output_size if mod is not None else arg(n, 1, "output_size")
    size = [size] if isinstance(size, int) else list(size)
    if any(d is None for d in size):
        raise Unsupported("adaptive_avg_pool2d keeping a dim (None)")
    return "adaptive_avg_pool2d", [n.args[0]], {"size": size}


def _avg_pool2d(n, mod):
    """F.avg_pool2d whose windows tile the input (kernel == stride, no
    padding, H and W multiples of it: DenseNet's transitions) is
    adaptive_avg_pool2d to (H / kh, W / kw), the same means."""
    if mod is not None:
        k, st, pad = mod.kernel_size, mod.stride, mod.padding
        ceil, div = mod.ceil_mode, mod.divisor_override
    else:
        k, st = arg(n, 1, "kernel_size"), arg(n, 2, "stride")
        pad, ceil = arg(n, 3, "padding", 0), arg(n, 4, "ceil_mode", False)
        div = arg(n, 6, "divisor_override")
    k = _pair(k)
    k = k * 2 if len(k) == 1 else k
    st = k if st in (None, [], ()) else _pair(st)
    st = st * 2 if len(st) == 1 else st
    x = meta(n.args[0])
    if x is None or x.dim() not in (3, 4) or div is not None or \
            any(_pair(pad)) or st != k:
        raise Unsupported("avg_pool2d other than windows that tile the "
                          "input (kernel == stride, no padding)")
    h, w = int(x.shape[-2]), int(x.shape[-1])
    if h % k[0] or w % k[1]:
        raise Unsupported("avg_pool2d of %dx%d by %dx%d windows: not a tiling"
                          % (h, w, k[0], k[1]))
    del ceil                      # no partial window when the windows tile
    return "adaptive_avg_pool2d", [n.args[0]], {"size": [h // k[0], w // k[1]]}


def _batch_norm(n, mod):
    if mod is not None:
        if mod.training or mod.running_mean is None:
            raise Unsupported("batch_norm in training mode")
        return "batch_norm", [n.args[0], mod.running_mean, mod.running_var,
                              mod.weight, mod.bias], {"eps": float(mod.eps)}
    if arg(n, 5, "training", False):
        raise Unsupported("batch_norm in training mode")
    w, b = arg(n, 3, "weight"), arg(n, 4, "bias")
    if w is None and b is not None:
        raise Unsupported("batch_norm with a bias and no weight")
    return "batch_norm", [n.args[0], arg(n, 1, "running_mean"),
                          arg(n, 2, "running_var"), w, b], \
        {"eps": float(arg(n, 7, "eps", 1e-5))}


def _conv2d(n, mod):
    if mod is not None:
        w, b, st, pad, dil, groups = (mod.weight, mod.bias, mod.stride, mod.padding,
                                      mod.dilation, mod.groups)
        if mod.padding_mode != "zeros":
            raise Unsupported("conv2d with padding_mode %r" % mod.padding_mode)
    else:
        w, b = arg(n, 1, "weight"), arg(n, 2, "bias")
        st, pad = arg(n, 3, "stride", 1), arg(n, 4, "padding", 0)
        dil, groups = arg(n, 5, "dilation", 1), arg(n, 6, "groups", 1)
    # torch's string paddings are the daemon's padding_mode ('same' pads
    # asymmetrically for an even kernel, as torch; it checks the stride)
    attrs = {"stride": _pair(st), "dilation": _pair(dil), "groups": int(groups)}
    if isinstance(pad, str):
        attrs["padding_mode"] = pad
    else:
        attrs["padding"] = _pair(pad)
    return "conv2d", [n.args[0], w, b], attrs


# pseudo ops: what each needs of the daemon (the rest are daemon ops)
PSEUDO = {"=": (), "addmm": ("linear",), "pow": ("mul",), "select": ("slice", "reshape"),
          "slices": ("slice", "reshape"), "roll": ("slice", "cat"),
          "pad": ("slice", "cat"), "take": ("embedding", "reshape")}
# ops that move data of any dtype (the rest compute in float32)
MOVES = {"=", "reshape", "expand", "permute", "slice", "select", "slices", "roll",
         "cat"} | INDEX_MOVES

RULES = {}
for _keys, _rule in (
        ((F.linear, torch._C._nn.linear, nn.Linear), _linear),
        ((F.relu, torch.relu, "relu", nn.ReLU), _unary("relu")),
        ((F.silu, "silu", nn.SiLU), _unary("silu")),
        ((torch.sigmoid, F.sigmoid, "sigmoid", nn.Sigmoid), _unary("sigmoid")),
        ((torch.tanh, F.tanh, "tanh", nn.Tanh), _unary("tanh")),
        ((F.hardtanh, F.relu6, nn.Hardtanh, nn.ReLU6, torch.clamp, torch.clip,
          "clamp", "clip"), _hardtanh),
        ((F.hardsigmoid, nn.Hardsigmoid), _unary("hardsigmoid")),
        ((operator.neg, torch.neg, torch.negative, "neg", "negative"), _unary("neg")),
        ((operator.abs, torch.abs, "abs"), _unary("abs")),
        ((torch.exp, "exp"), _unary("exp")),
        ((torch.log, "log"), _unary("log")),
        ((torch.sqrt, "sqrt"), _unary("sqrt")),
        ((torch.rsqrt, "rsqrt"), _unary("rsqrt")),
        ((torch.sin, "sin"), _unary("sin")),
        ((torch.cos, "cos"), _unary("cos")),
        ((F.hardswish, nn.Hardswish), _unary("hardswish")),
        ((F.gelu, "gelu", nn.GELU), _gelu),
        ((F.softmax, torch.softmax, "softmax", nn.Softmax), _softmax),
        ((F.log_softmax, torch.log_softmax, "log_softmax", nn.LogSoftmax),
         _log_softmax),
        ((torch.sum, "sum"), _reduce("sum")),
        ((torch.mean, "mean"), _reduce("mean")),
        ((torch.amax, "amax"), _reduce("amax")),
        ((F.max_pool2d, nn.MaxPool2d), _max_pool2d),
        ((F.adaptive_avg_pool2d, nn.AdaptiveAvgPool2d), _adaptive_avg_pool2d),
        ((F.avg_pool2d, nn.AvgPool2d), _avg_pool2d),
        ((F.batch_norm, nn.BatchNorm1d, nn.BatchNorm2d), _batch_norm),
        ((F.conv2d, nn.Conv2d), _conv2d),
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
        ((torch.roll, "roll"), _roll),
        ((F.pad, getattr(torch._C._nn, "pad", F.pad)), _pad),
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
RULES.update(INDEX_RULES)
del _keys, _rule, _k

INTS = {torch.int8, torch.uint8, torch.int32, torch.int64}   # add / sub / mul take
DTYPES = {torch.float32, torch.float16, torch.bfloat16, torch.float64,
          torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool}

