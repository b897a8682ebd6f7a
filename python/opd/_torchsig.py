"""opd._torchsig: torch's own signatures of opd's ops, as overloads of
torch.ops.opd.* (opd.torch), so that a call written for torch's function
runs as it is: torch.ops.opd.softmax(x, 1, dtype=torch.float32),
torch.ops.opd.sum(x, (0, 2), True), torch.ops.opd.layernorm(x, (64,), w, b),
torch.ops.opd.max_pool2d(x, 3, 2, 1), torch.ops.opd.sdpa(q, k, v,
attn_mask=m, is_causal=False).

DESIGN
An op whose opd signature names or types its attributes otherwise than
torch's function gets one more overload, opd::<op>.torch, with torch's
argument names, order and types (a torch.dtype, normalized_shape,
kernel_size, training, attn_mask, ...), registered CompositeImplicitAutograd
(torch.py's _overload): its implementation translates the arguments and
calls the op's default overload, so every backend (CPU, CUDA's C kernel),
fake tensors and torch.compile see the one op. torch resolves a call to
the first overload whose schema it fits, the opd one first: a call in
opd's form runs as before, one in torch's form (a positional attribute,
torch's keyword names, a torch.dtype) reaches .torch. What the op cannot
do (batch_norm's training=True, dropout, an enable_gqa with other head
counts) is refused with an OpdError naming the argument.
"""
import torch

from . import errors, protocol

_SIGS = {
    "softmax": "(Tensor x, int dim, ScalarType? dtype=None) -> Tensor",
    "log_softmax": "(Tensor x, int dim, ScalarType? dtype=None) -> Tensor",
    "sum": "(Tensor x, int[1]? dim, bool keepdim=False) -> Tensor",
    "mean": "(Tensor x, int[1]? dim, bool keepdim=False) -> Tensor",
    "amax": "(Tensor x, int[1]? dim, bool keepdim=False) -> Tensor",
    "layernorm": "(Tensor x, int[] normalized_shape, Tensor? weight=None, "
                 "Tensor? bias=None, float eps=1e-05) -> Tensor",
    "rmsnorm": "(Tensor x, int[] normalized_shape, Tensor? weight=None, "
               "float? eps=None) -> Tensor",
    "max_pool2d": "(Tensor x, int[2] kernel_size, int[2]? stride=None, int[2] padding=0, "
                  "int[2] dilation=1, bool ceil_mode=False, bool return_indices=False)"
                  " -> Tensor",
    "adaptive_avg_pool2d": "(Tensor x, int[2] output_size) -> Tensor",
    "batch_norm": "(Tensor x, Tensor? running_mean, Tensor? running_var, "
                  "Tensor? weight=None, Tensor? bias=None, bool training=False, "
                  "float momentum=0.1, float eps=1e-05) -> Tensor",
    "sdpa": "(Tensor q, Tensor k, Tensor v, Tensor? attn_mask=None, float dropout_p=0.0,"
            " bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor",
}


def _ints(v):
    """An int[N] argument as a list: torch hands a Python implementation
    the int it was given (int[2] padding=1), not its expansion."""
    return [int(x) for x in v] if isinstance(v, (list, tuple)) else [int(v)]


def _refuse(op, what):
    return errors.error(protocol.EINVAL, "%s: %s is not supported" % (op, what))


def _softmax(op):
    def f(x, dim, dtype=None):
        return op.default(x, dim=dim, dtype="" if dtype is None else
                          str(dtype).replace("torch.", ""))
    return f


def _reduce(op):
    def f(x, dim, keepdim=False):
        kw = {"keepdim": bool(keepdim)}
        if dim is not None and _ints(dim):  # None or (): every dim
            kw["dims"] = _ints(dim)
        return op.default(x, **kw)
    return f


def _layernorm(op):
    def f(x, normalized_shape, weight=None, bias=None, eps=1e-5):
        return op.default(x, weight, bias, eps=eps, ndims=len(_ints(normalized_shape)))
    return f


def _rmsnorm(op):
    def f(x, normalized_shape, weight=None, eps=None):
        kw = {"ndims": len(_ints(normalized_shape))}
        if eps is not None:
            kw["eps"] = eps
        return op.default(x, weight, **kw)
    return f


def _max_pool2d(op):
    def f(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
          return_indices=False):
        if return_indices:
            raise _refuse("max_pool2d", "return_indices=True (the indices)")
        kw = {"kernel": _ints(kernel_size), "padding": _ints(padding),
              "dilation": _ints(dilation), "ceil_mode": bool(ceil_mode)}
        if stride is not None and _ints(stride):     # None or []: the kernel
            kw["stride"] = _ints(stride)
        return op.default(x, **kw)
    return f


def _adaptive_avg_pool2d(op):
    return lambda x, output_size: op.default(x, size=_ints(output_size))


def _batch_norm(op):
    def f(x, running_mean, running_var, weight=None, bias=None, training=False,
          momentum=0.1, eps=1e-5):
        if training:
            raise _refuse("batch_norm", "training=True (the op is inference: "
                          "running statistics)")
        if running_mean is None or running_var is None:
            raise _refuse("batch_norm", "running_mean or running_var None")
        return op.default(x, running_mean, running_var, weight, bias, eps=eps)
    return f


def _sdpa(op):
    def f(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
          enable_gqa=False):
        if dropout_p:
            raise _refuse("sdpa", "dropout_p=%r (dropout)" % dropout_p)
        if enable_gqa and q.dim() >= 3 and k.shape[-3] != q.shape[-3]:
            raise _refuse("sdpa", "enable_gqa with %d query and %d key heads"
                          % (q.shape[-3], k.shape[-3]))
        kw = {"causal": bool(is_causal)}
        if scale is not None:
            kw["scale"] = float(scale)
        return op.default(q, k, v, attn_mask, **kw)
    return f


_IMPLS = {"softmax": _softmax, "log_softmax": _softmax, "sum": _reduce,
          "mean": _reduce, "amax": _reduce, "layernorm": _layernorm,
          "rmsnorm": _rmsnorm, "max_pool2d": _max_pool2d,
          "adaptive_avg_pool2d": _adaptive_avg_pool2d, "batch_norm": _batch_norm,
          "sdpa": _sdpa}


def torch_overloads(define, name):
    """Defines opd::<name>.torch, torch's signature of op <name>, through
    define(overload name, schema string, implementation); an op whose
    signature is torch's already (or has no torch counterpart) gets
    none. Returns True when it defined one."""
    make = _IMPLS.get(name)
    if make is None:
        return False
    define("torch", _SIGS[name], make(getattr(torch.ops.opd, name)))
    return True
