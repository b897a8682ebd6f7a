"""The case table of the OpInfo conformance suite (test_conformance.py):
for each opd op with a torch counterpart, the OpInfo entries whose sample
inputs it is run on and how one sample becomes a torch.ops.opd call.

DESIGN
An entry of OPS is (opd op, OpInfo name, OpInfo variant, adapter, dtypes
extra to float32). The adapter takes one OpInfo SampleInput and returns
a function of no arguments making the torch.ops.opd call: the sample's
own arguments where the op has torch's signature (as_torch: its own or
opd._torchsig's .torch overload), else torch's argument names and forms
translated to the opd op's (a stride int to a list, transpose's two dims
to permute's), and nothing else. A sample whose torch call is outside what the opd op is
(dropout, batch_norm in training, max_pool2d's indices: random or other
ops) raises OutOfScope and is counted apart, never run; an argument the
opd op has no attribute for is passed on when the op's schema has it
(conv2d's groups, and a padding string as padding_mode, once it does) and
otherwise raises NoAttr, counted as unsupported with that reason. Everything else is left to opd to refuse.
"""
import torch

O = torch.ops.opd


class OutOfScope(Exception):
    """This sample calls something the opd op is not (str: what)."""


class NoAttr(Exception):
    """The opd op has no attribute for an argument the sample gives."""


def _attrs(op):
    import opd.torch as ot
    return {a["name"]: a for a in ot._ops[op][1]["attrs"]}


def _need(op, name, value):
    """{name: value} when op has attribute `name`, else NoAttr."""
    if name not in _attrs(op):
        raise NoAttr("%s: no attribute %s (%s=%r given)" % (op, name, name, value))
    return {name: value}


def _ints(v):
    if isinstance(v, (tuple, list, torch.Size)):
        return [int(x) for x in v]
    return [int(v)]


def _kw(s, i, name, default=None):
    """Argument `name` of sample s: positional arg i (after the input) or
    keyword."""
    if len(s.args) > i:
        return s.args[i]
    return s.kwargs.get(name, default)


def as_torch(op):
    """The sample's own call, torch's signature (opd._torchsig's .torch
    overloads): f(input, *args, **kwargs)."""
    return lambda s: (lambda: getattr(O, op)(s.input, *s.args, **s.kwargs))


def gelu(s):
    return lambda: O.gelu(s.input, approximate=s.kwargs.get("approximate", "none"))


def unary(op):
    return lambda s: (lambda: getattr(O, op)(s.input))


def binary(op):
    def adapt(s):
        other = s.args[0] if s.args else s.kwargs["other"]
        kw = {}
        if "alpha" in s.kwargs:
            kw["alpha"] = s.kwargs["alpha"]
        return lambda: getattr(O, op)(s.input, other, **kw)
    return adapt


def matmul(s):
    return lambda: O.matmul(s.input, s.args[0])


def linear(s):
    w, b = s.args[0], _kw(s, 1, "bias")
    return lambda: O.linear(s.input, w, b)


def conv2d(s):
    w, b = s.args[0], _kw(s, 1, "bias")
    kw = {}
    for i, name, default in ((2, "stride", 1), (3, "padding", 0), (4, "dilation", 1),
                             (5, "groups", 1)):
        v = _kw(s, i, name, default)
        if name == "groups":
            if v != 1:
                kw.update(_need("conv2d", "groups", int(v)))
        elif isinstance(v, str):        # torch's 'same' / 'valid'
            if "padding_mode" not in _attrs("conv2d"):
                raise NoAttr("conv2d: padding=%r (a padding string; the op has "
                             "no padding_mode)" % v)
            kw["padding_mode"] = v
        else:
            kw[name] = _ints(v)
    return lambda: O.conv2d(s.input, w, b, **kw)


def embedding(s):
    # OpInfo's embedding: (weight, idx) -> F.embedding(idx, weight)
    idx = s.args[0]
    if s.kwargs.get("max_norm") is not None:
        raise OutOfScope("embedding max_norm (renormalizes the weight in place)")
    # padding_idx, scale_grad_by_freq, sparse change only gradients
    return lambda: O.embedding(s.input, idx)


def where(s):
    # OpInfo's where: (self, condition, other) -> torch.where(condition, self, other)
    cond, other = s.args[0], s.args[1]
    return lambda: O.where(cond, s.input, other)


def max_pool2d(s):
    if s.kwargs.get("return_indices"):
        raise OutOfScope("max_pool2d return_indices (max_pool2d_with_indices)")
    return as_torch("max_pool2d")(s)


def adaptive_avg_pool2d(s):
    # torch's None in output_size keeps the input's extent; the .torch
    # overload takes ints
    size = _kw(s, 0, "output_size")
    size = list(size) if isinstance(size, (tuple, list)) else [size, size]
    size = [s.input.shape[-2 + i] if v is None else int(v) for i, v in enumerate(size)]
    return lambda: O.adaptive_avg_pool2d(s.input, size)


def batch_norm(s):
    if _kw(s, 4, "training", False):
        raise OutOfScope("batch_norm training=True (the op is inference)")
    return as_torch("batch_norm")(s)


def sdpa(s):
    if _kw(s, 3, "dropout_p", 0.0):
        raise OutOfScope("scaled_dot_product_attention dropout_p > 0 (random)")
    return as_torch("sdpa")(s)


def permute(s):
    dims = s.args[0] if len(s.args) == 1 else s.args
    return lambda: O.permute(s.input, dims=_ints(dims))


def transpose(s):
    d0, d1 = s.args[0], s.args[1]
    n = max(s.input.dim(), 1)
    dims = list(range(s.input.dim()))
    if dims:
        dims[d0 % n], dims[d1 % n] = dims[d1 % n], dims[d0 % n]
    return lambda: O.permute(s.input, dims=dims)


def cat(s):
    dim = _kw(s, 0, "dim", 0)
    return lambda: O.cat(list(s.input), dim=int(dim))


def shape_op(op):
    def adapt(s):
        shape = s.args[0] if len(s.args) == 1 else s.args
        return lambda: getattr(O, op)(s.input, shape=_ints(shape))
    return adapt


def narrow(s):
    dim, start, length = s.args[0], int(s.args[1]), int(s.args[2])
    return lambda: O.slice(s.input, dim=dim, start=start, end=start + length)


def copy(s):
    return lambda: O.copy(s.input)


def _first(t):
    return t.flatten()[0].item() if t.numel() else 1.0


def binary_variants(s):
    """The sample with `other` a Python float, int and bool, a numpy
    float32 and float64, an int64 tensor and a float64 0-d tensor (torch's
    type promotion: each result is float32)."""
    from torch.testing._internal.opinfo.core import SampleInput
    import numpy as np
    o = s.args[0]
    v = _first(o)
    forms = [("float", v), ("int", int(v)), ("bool", bool(v)),
             ("np.float32", np.float32(v)), ("np.float64", np.float64(v)),
             ("int64 tensor", o.round().to(torch.int64)),
             ("float64 0-d", torch.tensor(v, dtype=torch.float64))]
    return [(label, SampleInput(s.input, args=(x,) + tuple(s.args[1:]),
                                kwargs=s.kwargs)) for label, x in forms]


def where_variants(s):
    """where's sample with y, x or both Python floats, and with y an int64
    tensor (promoted to x's float32)."""
    from torch.testing._internal.opinfo.core import SampleInput
    cond, y = s.args[0], s.args[1]
    xv, yv = _first(s.input), _first(y)
    return [("y float", SampleInput(s.input, args=(cond, yv))),
            ("x float", SampleInput(xv, args=(cond, y))),
            ("x, y floats", SampleInput(xv, args=(cond, yv))),
            ("y int64 tensor", SampleInput(s.input, args=(cond, y.round().to(torch.int64))))]


# opd op -> f(float32 sample) -> [(label, derived sample)]: torch's scalar
# operands and type promotion, which OpInfo's sample_inputs leave to its
# reference inputs
VARIANTS = {"add": binary_variants, "sub": binary_variants, "mul": binary_variants,
            "div": binary_variants, "where": where_variants}
VARIANT_SAMPLES = 4     # the first samples of each op that get VARIANTS

ANY = (torch.int64, torch.bool)    # the extra dtypes of ops taking any dtype

# (opd op, OpInfo name, OpInfo variant_test_name, adapter, extra dtypes)
OPS = [
    ("softmax", "softmax", "", as_torch("softmax"), ()),
    ("softmax", "softmax", "with_dtype", as_torch("softmax"), ()),
    ("log_softmax", "log_softmax", "", as_torch("log_softmax"), ()),
    ("log_softmax", "log_softmax", "with_dtype", as_torch("log_softmax"), ()),
    ("layernorm", "nn.functional.layer_norm", "", as_torch("layernorm"), ()),
    ("rmsnorm", "nn.functional.rms_norm", "", as_torch("rmsnorm"), ()),
    ("gelu", "nn.functional.gelu", "", gelu, ()),
    ("relu", "nn.functional.relu", "", unary("relu"), ()),
    ("silu", "nn.functional.silu", "", unary("silu"), ()),
    ("sigmoid", "sigmoid", "", unary("sigmoid"), ()),
    ("tanh", "tanh", "", unary("tanh"), ()),
    ("add", "add", "", binary("add"), ()),
    ("sub", "sub", "", binary("sub"), ()),
    ("mul", "mul", "", binary("mul"), ()),
    ("div", "div", "no_rounding_mode", binary("div"), ()),
    ("matmul", "matmul", "", matmul, ()),
    ("linear", "nn.functional.linear", "", linear, ()),
    ("conv2d", "nn.functional.conv2d", "", conv2d, ()),
    ("embedding", "nn.functional.embedding", "", embedding, ()),
    ("where", "where", "", where, ANY),
    ("sum", "sum", "", as_torch("sum"), ANY),
    ("mean", "mean", "", as_torch("mean"), ()),
    ("amax", "amax", "", as_torch("amax"), ()),
    ("max_pool2d", "nn.functional.max_pool2d", "", max_pool2d, ()),
    ("adaptive_avg_pool2d", "nn.functional.adaptive_avg_pool2d", "",
     adaptive_avg_pool2d, ()),
    ("batch_norm", "nn.functional.batch_norm", "", batch_norm, ()),
    ("sdpa", "nn.functional.scaled_dot_product_attention", "", sdpa, ()),
    ("permute", "permute", "", permute, ANY),
    ("permute", "transpose", "", transpose, ANY),
    ("cat", "cat", "", cat, ANY),
    ("reshape", "reshape", "", shape_op("reshape"), ANY),
    ("expand", "expand", "", shape_op("expand"), ANY),
    ("slice", "narrow", "", narrow, ANY),
    ("copy", "contiguous", "", copy, ANY),
]
