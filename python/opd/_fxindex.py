"""opd._fxindex: the torch.compile backend's rules for indexing by
tensors (part of the support table, opd._fxrules): torch.gather.

DESIGN
Each rule reads the node as the table's others do (opd._fxbase) and
returns (opd op, inputs, attrs) or raises Unsupported. The ops here move
elements of any dtype (INDEX_MOVES: _fxlower checks their dtypes as the
data movement ops'); their index tensors are int64, as torch's.
"""
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


INDEX_MOVES = {"gather"}
INDEX_RULES = {}
for _keys, _rule in (((torch.gather, "gather"), _gather),):
    for _k in _keys:
        INDEX_RULES[_k] = _rule
del _keys, _rule, _k
