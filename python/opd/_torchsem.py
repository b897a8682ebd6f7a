"""opd._torchsem: torch's semantics where an opd op's own are narrower, for
torch.ops.opd.* (opd.torch): scalar operands, type promotion, torch's
forms of a few arguments and signatures.

DESIGN
Three mechanisms, all applied before the daemon sees a call:
  scalar overloads  add, sub, mul, div and where take Python numbers
        (bool, int, float) and numpy scalars where torch does: overloads
        opd::<op>.Scalar (Scalar, keeping a number's kind for promotion)
        and opd::<op>.np_scalar (float: torch's Scalar refuses numpy's
        float32 and int64, its float takes them, as a float) beside the
        Tensor one, registered CompositeImplicitAutograd: the number
        becomes a 0-d tensor of torch.result_type(tensor, number) on the
        tensor's device and the call goes on as the Tensor overload, so
        CPU, CUDA (libopd's C kernel), fake tensors and torch.compile
        all see the one op. A complex number is refused naming the
        scalar (opd has no complex dtype).
  torch overloads  each op's overload with torch's own signature where
        the op's differs (_torchsig.py), CompositeImplicitAutograd too.
  adjust(name, ins, attrs)  on the CPU path (_torchops.OpRunner.call) and
        in the fake implementation (torch.py): the inputs and attributes
        torch takes that the daemon does not, made into ones it takes
        (RULES, one function per op):
        - add, sub, mul, div (and where's x and y) convert operands of
          different dtypes to torch.result_type (a copy of each converted
          operand, counted nowhere else: docs/python.md); div of two
          integer or bool operands, sigmoid and tanh of one, go to torch's
          default float dtype, softmax/log_softmax of an integer x with
          dtype= to that dtype, as torch computes them; sub refuses bool
          operands, as torch does;
        - an empty dim list of sum/mean/amax is every dim (torch's
          dim=()); permute/expand of a 0-d tensor (an empty int list,
          which opd's attributes cannot hold) is a copy, and reshape to ()
          one to (1,) viewed as ();
        - linear with a 1-D weight (K) runs with weight (1, K) and drops
          the last dim; cat skips a 1-D empty input beside inputs of other
          ranks (torch's legacy rule); sdpa's q, k, v of different ranks
          broadcast their batch dims (stride-0 views, made contiguous as
          any view is).
        It returns None when nothing changes (the common case: one dict
        look-up), else (op, ins, attrs, drop): the call runs op instead,
        and with drop its output's last dim (extent 1) is dropped (a view;
        a given out= tensor gets that dim added, a view too). libopd's C
        kernel on CUDA tensors takes the daemon's forms only: there mixed
        dtypes are refused by the daemon, naming them.
"""
import torch

from . import errors, protocol

BINARY = ("add", "sub", "mul", "div")


def _scalar_tensor(op, like, v):
    """Number v as a 0-d tensor of torch.result_type(like, v) on like's
    device (torch's rule: a number does not widen a tensor of its kind)."""
    if op == "sub" and isinstance(v, bool):
        raise errors.error(protocol.EDTYPE, "sub: the scalar operand %r is a "
                           "bool, which torch's subtraction refuses" % v)
    if isinstance(v, complex):
        raise errors.error(protocol.EDTYPE, "%s: the scalar operand %r is "
                           "complex; opd has no complex dtype (scalars may be "
                           "bool, int or float)" % (op, v))
    return torch.tensor(v, dtype=torch.result_type(like, v), device=like.device)


def _swap_type(schema_str, arg, typ):
    """schema_str with argument `arg`'s type Tensor replaced by typ."""
    old = "Tensor %s" % arg
    assert old in schema_str, (schema_str, arg)
    return schema_str.replace(old, "%s %s" % (typ, arg), 1)


def scalar_overloads(define, name, schema_str):
    """Defines the scalar overloads of opd::<name> (add, sub, mul, div:
    b a number; where: x, y or both numbers) through define(overload
    name, schema string, implementation); other ops get none."""
    op = getattr(torch.ops.opd, name)
    if name in BINARY:
        def scalar_b(a, b, **kw):
            return op.default(a, _scalar_tensor(name, a, b), **kw)
        define("Scalar", _swap_type(schema_str, "b", "Scalar"), scalar_b)
        define("np_scalar", _swap_type(schema_str, "b", "float"), scalar_b)
    elif name == "where":
        def scalar_y(cond, x, y):
            return op.default(cond, x, _scalar_tensor(name, x, y))

        def scalar_x(cond, x, y):
            return op.default(cond, _scalar_tensor(name, y, x), y)

        def scalars(cond, x, y):
            t = torch.tensor(x, device=cond.device)   # torch's dtype of x
            dt = torch.result_type(t, y)
            return op.default(cond, _scalar_tensor(name, t.to(dt), x),
                              _scalar_tensor(name, t.to(dt), y))
        define("ScalarOther", _swap_type(schema_str, "y", "Scalar"), scalar_y)
        define("ScalarSelf", _swap_type(schema_str, "x", "Scalar"), scalar_x)
        define("Scalar", _swap_type(_swap_type(schema_str, "x", "Scalar"), "y",
                                    "Scalar"), scalars)


def _promote(ins, i, j):
    a, b = ins[i], ins[j]
    if a.dtype == b.dtype:
        return None
    dt = torch.result_type(a, b)
    ins = list(ins)
    ins[i], ins[j] = a.to(dt), b.to(dt)
    return ins


def _floating(ins):
    """ins with each integer or bool tensor as torch's default float dtype
    (torch's true division, sigmoid and tanh of integers)."""
    if all(t.is_floating_point() for t in ins):
        return None
    dt = torch.get_default_dtype()
    return [t if t.is_floating_point() else t.to(dt) for t in ins]


def _to_float(name, ins, attrs):
    ins = _floating(ins[:1]) if len(ins) == 1 else None
    return None if ins is None else (name, ins, attrs, False)


def _softmax(name, ins, attrs):
    # an integer x with dtype= (torch's only way to softmax one): x in it
    dt = attrs.get("dtype")
    if not dt or len(ins) != 1 or ins[0].is_floating_point():
        return None
    return name, [ins[0].to(getattr(torch, dt))], attrs, False


def _binary(name, ins, attrs):
    if len(ins) != 2 or (ins[0].dtype == ins[1].dtype and ins[0].is_floating_point()):
        return None                     # the common case: nothing to do
    if name == "sub" and any(t.dtype == torch.bool for t in ins):
        raise errors.error(protocol.EDTYPE, "sub: a bool operand, which "
                           "torch's subtraction refuses")
    if name == "div" and not (ins[0].is_floating_point() or ins[1].is_floating_point()):
        return name, _floating(ins), attrs, False
    ins = _promote(ins, 0, 1)
    return None if ins is None else (name, ins, attrs, False)


def _where(name, ins, attrs):
    if len(ins) == 3:
        ins = _promote(ins, 1, 2)
        return None if ins is None else (name, ins, attrs, False)
    return None


def _reduce(name, ins, attrs):
    if attrs.get("dims") == []:          # torch's dim=(): every dim
        attrs = dict(attrs)
        del attrs["dims"]
        return name, ins, attrs, False
    return None


def _zero_d(key):
    def rule(name, ins, attrs):
        if attrs.get(key) != [] or not ins:
            return None
        if name == "reshape":           # (1,) then a 0-d view of it
            return name, ins, {"shape": [1]}, True
        return ("copy", ins, {}, False) if ins[0].dim() == 0 else None
    return rule


def _linear(name, ins, attrs):
    if len(ins) >= 2 and ins[1].dim() == 1:
        ins = list(ins)
        ins[1] = ins[1].reshape(1, -1)
        if len(ins) > 2 and ins[2] is not None and ins[2].dim() == 0:
            ins[2] = ins[2].reshape(1)
        return name, ins, attrs, True
    return None


def _cat(name, ins, attrs):
    # torch's legacy rule: a 1-D empty input beside inputs of other ranks
    # is skipped
    skip = [t for t in ins if t.dim() == 1 and t.shape[0] == 0]
    if not skip or len(skip) == len(ins) or all(t.dim() == 1 for t in ins):
        return None
    return name, [t for t in ins if not (t.dim() == 1 and t.shape[0] == 0)], attrs, False


def _sdpa(name, ins, attrs):
    # q, k, v of other ranks: their batch dims broadcast (stride-0 views)
    if len(ins) < 3 or len({t.dim() for t in ins[:3]}) == 1:
        return None
    batch = torch.broadcast_shapes(*[t.shape[:-2] for t in ins[:3]])
    return name, [t.expand(batch + t.shape[-2:]) for t in ins[:3]] + list(ins[3:]), \
        attrs, False


RULES = {"softmax": _softmax, "log_softmax": _softmax, "sigmoid": _to_float, "tanh": _to_float, "add": _binary, "sub": _binary, "mul": _binary, "div": _binary,
         "where": _where, "sum": _reduce, "mean": _reduce, "amax": _reduce,
         "permute": _zero_d("dims"), "expand": _zero_d("shape"),
         "reshape": _zero_d("shape"), "linear": _linear, "cat": _cat,
         "sdpa": _sdpa}


def adjust(name, ins, attrs):
    """None when the daemon takes this call as torch gives it; else (op,
    ins, attrs, drop): run op on ins with attrs instead, and with drop take
    each output without its last dim (extent 1). See DESIGN."""
    rule = RULES.get(name)
    if rule is None:
        return None
    for t in ins:
        if t is None or not isinstance(t, torch.Tensor):
            return None
    return rule(name, ins, attrs)
