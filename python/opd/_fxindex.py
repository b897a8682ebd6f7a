"""opd._fxindex: the torch.compile backend's rules for indexing,
selecting and comparing (part of the support table, opd._fxrules):
torch.gather, masked_fill, torch.where, zeros_like / ones_like /
full_like, x[index], and ==, !=, <, <=, >, >= (torch.eq ... torch.ge).

DESIGN
Each rule reads the node as the table's others do (opd._fxbase) and
returns (opd op, inputs, attrs) or raises Unsupported. The ops here take
elements of any dtype (INDEX_MOVES: _fxlower checks their dtypes as the
data movement ops'); gather's index tensors are int64, where's condition
bool, as torch's; a comparison's operands share one dtype and its result
is bool. A number operand becomes a 0-d constant tensor of the
node's result dtype (torch's promotion of a number against a tensor of
that dtype: the result is the tensor's dtype), given to the graph as
its constant:
- masked_fill(x, mask, v) is where(mask, v, x);
- torch.where(cond, a, b) is where, a tensor operand of another dtype
  than the result's refused (opd's where does not convert);
- zeros_like / ones_like / full_like(x) are expand of a 0-d constant to
  x's shape (a copy in the graph; constant inputs fold before, _fxnorm);
- x[index] with an integer tensor index (Swin's relative position bias,
  a table indexed by a buffer) is the pseudo op "take": x as (n0, rest)
  rows, embedding by index, reshaped to index's shape + x's trailing
  extents (_fxgraph). torch wraps a negative index, embedding refuses it
  (CPU) or gives zeros (CUDA): the index must be a constant of the graph
  (a parameter or buffer) whose values are in [0, n0), checked here;
- a comparison of a tensor with a number takes the number as a constant
  of the tensor's dtype (torch's promotion, where the number's kind does
  not widen it: a float number against an integer tensor, or an integer
  outside the dtype's range, stays torch's).
"""
import operator

import torch

from ._fxbase import Unsupported, arg, meta


def _gather(n, mod):
    """torch.gather(x, dim, index) and x.gather(dim, index): the gather op
    (sparse_grad changes only the gradient)."""
    x, dim, index = n.args[0], arg(n, 1, "dim"), arg(n, 2, "index")
    if not isinstance(dim, int):
        raise Unsupported("gather with a dim of %s" % type(dim).__name__)
    im = meta(index)
    if im is None or im.dtype != torch.int64:
        raise Unsupported("gather with an index that is not an int64 tensor")
    return "gather", [x, index], {"dim": dim}


def _take(n, x, index):
    """x[index] (getitem's rule hands it over): the pseudo op take."""
    im = meta(index)
    if im.dtype not in (torch.int32, torch.int64):
        raise Unsupported("indexing with a %s tensor: opd takes integer indices"
                          % str(im.dtype).replace("torch.", ""))
    v = getattr(index, "meta", {}).get("opd_value")
    rows = int(meta(x).shape[0]) if meta(x).dim() else 0
    if v is None:
        raise Unsupported("indexing by a tensor that is not a constant of the graph "
                          "(negative indices would wrap in torch)")
    if v.numel() and (int(v.min()) < 0 or int(v.max()) >= rows):
        raise Unsupported("an index outside [0, %d)" % rows)
    return "take", [x, index], {"rows": rows, "shape": [int(d) for d in meta(n).shape]}


def _operand(v, like, what):
    """A where operand: node v if its dtype is like's, a number as a 0-d
    constant of like's dtype and device."""
    if isinstance(v, bool) or isinstance(v, (int, float)):
        return torch.tensor(v, dtype=like.dtype, device=like.device)
    m = meta(v)
    if m is None:
        raise Unsupported("%s of %s" % (what, type(v).__name__))
    if m.dtype != like.dtype:
        raise Unsupported("%s with a %s operand for a %s result" % (
            what, str(m.dtype).replace("torch.", ""), str(like.dtype).replace("torch.", "")))
    return v


def _masked_fill(n, mod):
    x, mask, v = n.args[0], arg(n, 1, "mask"), arg(n, 2, "value")
    out = meta(n)
    if meta(mask) is None or meta(mask).dtype != torch.bool:
        raise Unsupported("masked_fill with a mask that is not a bool tensor")
    return "where", [mask, _operand(v, out, "masked_fill"), _operand(x, out, "masked_fill")], {}


def _where(n, mod):
    if n.op == "call_method":               # x.where(cond, y)
        a, cond, b = n.args[0], arg(n, 1, "condition"), arg(n, 2, "other")
    else:                                   # torch.where(cond, x, y)
        cond, a, b = arg(n, 0, "condition"), arg(n, 1, "input"), arg(n, 2, "other")
    if a is None or b is None:
        raise Unsupported("torch.where(cond) (the indices of its True elements)")
    if meta(cond) is None or meta(cond).dtype not in (torch.bool, torch.uint8):
        raise Unsupported("where with a condition that is not a bool tensor")
    out = meta(n)
    return "where", [cond, _operand(a, out, "where"), _operand(b, out, "where")], {}


def _full_like(n, mod):
    name = getattr(n.target, "__name__", "")
    if name == "full_like":
        v = arg(n, 1, "fill_value")
    else:
        v = 1 if name == "ones_like" else 0
    out = meta(n)
    if not isinstance(v, (bool, int, float)):
        raise Unsupported("full_like with a tensor fill value")
    return "expand", [torch.full((), v, dtype=out.dtype, device=out.device)], \
        {"shape": [int(d) for d in out.shape]}


def _compare(op):
    def rule(n, mod):
        a, b = n.args[0], arg(n, 1, "other")
        like = meta(a) if meta(a) is not None else meta(b)
        if like is None:
            raise Unsupported("%s of two numbers" % op)
        ins = []
        for x in (a, b):
            if isinstance(x, (bool, int, float)):
                if isinstance(x, float) and not like.is_floating_point():
                    raise Unsupported("%s of an integer tensor and a float" % op)
                if isinstance(x, int) and not isinstance(x, bool) and \
                        not like.is_floating_point() and like.dtype != torch.bool:
                    info = torch.iinfo(like.dtype)
                    if not info.min <= x <= info.max:
                        raise Unsupported("%s with %d, outside %s" % (op, x, like.dtype))
                x = torch.tensor(x, dtype=like.dtype, device=like.device)
            elif meta(x) is None:
                raise Unsupported("%s of %s" % (op, type(x).__name__))
            elif meta(x).dtype != like.dtype:
                raise Unsupported("%s of %s and %s tensors" % (op, like.dtype, meta(x).dtype))
            ins.append(x)
        return op, ins, {}
    return rule


COMPARES = {"eq": (operator.eq, torch.eq, "eq", "__eq__"),
            "ne": (operator.ne, torch.ne, "ne", "__ne__"),
            "lt": (operator.lt, torch.lt, torch.less, "lt", "less"),
            "le": (operator.le, torch.le, "le"),
            "gt": (operator.gt, torch.gt, torch.greater, "gt", "greater"),
            "ge": (operator.ge, torch.ge, "ge")}
INDEX_MOVES = {"gather", "where", "take"} | set(COMPARES)
INDEX_RULES = {}
for _keys, _rule in (((torch.gather, "gather"), _gather),
                     ((torch.masked_fill, "masked_fill"), _masked_fill),
                     ((torch.where, "where"), _where),
                     ((torch.zeros_like, torch.ones_like, torch.full_like), _full_like)) + \
        tuple((keys, _compare(op)) for op, keys in COMPARES.items()):
    for _k in _keys:
        INDEX_RULES[_k] = _rule
del _keys, _rule, _k
