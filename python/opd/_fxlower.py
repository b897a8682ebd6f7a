"""opd._fxlower: the checks every node of the torch.compile backend shares
(opd.dynamo), over the support table of opd._fxrules.

DESIGN
spec() looks the node up in _fxrules.RULES (a node with no rule stays in
torch, logged "no opd op") and adds the checks every node shares: the op
is one the daemon lists (so an op added to the daemon later is picked
up, and one it lacks falls back), every tensor is float32 with a static
shape (the data movement ops take any dtype, embedding's indices are
integers, sdpa's mask may be bool, add / sub / mul take integer tensors
of one dtype), on the CPU or on a CUDA device the
daemon has, and the output is one tensor that needs no autograd (opd
graphs run forward only: a node whose output requires grad stays torch's,
so training still differentiates). The same spec() serves the
partitioner's question (is this node supported?) on the dynamo graph and
the emission of the node into an opd graph (Part, on the fused
submodule's copy of it, _fxgraph.py), where a relu / gelu / silu that is
a linear's only user is fused into the linear's `act` (fused_act).
Without a `linear` op in the daemon, a linear whose weight is a constant
becomes matmul with the weight transposed once (a constant) plus add.
"""
import torch

from ._fxrules import (DTYPES, INTS, MOVES, PSEUDO, RULES, Unsupported,  # noqa: F401
                       _is_tensor, _static, arg, meta)


ACTS = {"relu": "relu", "silu": "silu"}    # op -> linear's act (gelu: below)


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
    if out.requires_grad and not node.meta.get("opd_no_grad"):
        # (compiled with grad off, dynamo guarding it: a view of a parameter
        # still says requires_grad in its fake value)
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
        elif op in ("add", "sub", "mul") and x.dtype in INTS and x.dtype == out.dtype:
            pass                          # integer arithmetic, one dtype
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
