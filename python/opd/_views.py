"""opd._views: the geometry of Tensor views (indexing, view/reshape,
transpose, expand), as pure functions of (shape, strides).

DESIGN
A view shares its tensor's memory and differs only in its byte offset,
shape and strides (in elements), so every view here is a function from
(shape, strides, arguments) to (element offset, shape, strides); the
Tensor builds the new Tensor from that (tensor.py), and this module knows
no Tensor (no import cycle). The rules are numpy's and torch's: basic
indexing with ints, slices of any positive step, Ellipsis and None;
view() succeeds exactly when torch's would (the new shape splits and
merges only dims that are contiguous with each other); expand() gives new
or size-1 dims stride 0. Strides are never negative (the protocol's
descriptors refuse them), so a negative slice step raises. Errors are
errors.error(...) with the protocol code torch's users would expect
(IndexError-like cases as EINVAL / ESHAPE).
"""
from . import errors, protocol


def _bad(code, msg):
    return errors.error(code, msg)


def index(shape, strides, idx):
    """The view t[idx]: returns (element offset, shape, strides). idx is an
    int, a slice (step >= 1), Ellipsis, None (a new dim of size 1) or a
    tuple of them. Raises IndexError for an int out of range, TypeError
    for other kinds of index, BadArgumentError (EINVAL) for a step < 1."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
    if sum(1 for i in idx if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if n_real > len(shape):
        raise IndexError("too many indices for a tensor of dimension %d"
                         % len(shape))
    off, out_shape, out_strides, d = 0, [], [], 0
    for i in idx:
        if i is Ellipsis:
            for _ in range(len(shape) - n_real):
                out_shape.append(shape[d])
                out_strides.append(strides[d])
                d += 1
        elif i is None:
            out_shape.append(1)
            out_strides.append(0)
        elif isinstance(i, slice):
            a, b, step = i.indices(shape[d])
            if step < 1:
                raise _bad(protocol.EINVAL, "slice step %d: opd views take "
                           "steps >= 1 (strides are never negative)" % step)
            n = max(0, (b - a + step - 1) // step)
            off += a * strides[d] if n else 0
            out_shape.append(n)
            out_strides.append(strides[d] * step)
            d += 1
        elif isinstance(i, int) or hasattr(i, "__index__"):
            k = i.__index__()
            if k < 0:
                k += shape[d]
            if not 0 <= k < shape[d]:
                raise IndexError("index %d out of range for dim %d of size %d"
                                 % (i, d, shape[d]))
            off += k * strides[d]
            d += 1
        else:
            raise TypeError("opd tensors take ints, slices, ... and None as "
                            "indices, not %s; use .numpy() for more"
                            % type(i).__name__)
    out_shape += shape[d:]
    out_strides += strides[d:]
    return off, tuple(out_shape), tuple(out_strides)


def new_shape(size, shape):
    """shape with its one -1 resolved for `size` elements; raises
    BadArgumentError (ESHAPE) when it does not hold them."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    shape = [int(d) for d in shape]
    if shape.count(-1) > 1:
        raise _bad(protocol.ESHAPE, "reshape: more than one -1")
    rest = 1
    for d in shape:
        if d != -1:
            rest *= d
    if -1 in shape:
        k = shape.index(-1)
        shape[k] = size // rest if rest else 0
        rest *= shape[k] if rest else 1
    if rest != size or any(d < 0 for d in shape):
        raise _bad(protocol.ESHAPE, "reshape: %d elements do not fit shape %s"
                   % (size, tuple(shape)))
    return tuple(shape)


def view_strides(shape, strides, shape2):
    """The strides of shape2 over the same elements as (shape, strides),
    or None when no strides can express it without a copy (torch's
    computeStride: each run of new dims must fill a run of old dims that
    are contiguous with each other)."""
    size = 1
    for d in shape:
        size *= d
    if size <= 1:  # nothing to keep apart: contiguous strides
        acc, out = 1, []
        for d in reversed(shape2):
            out.append(acc)
            acc *= max(d, 1)
        return tuple(reversed(out))
    out = [0] * len(shape2)
    k = len(shape2) - 1
    base = strides[-1]
    old_n = new_n = 1
    for d in range(len(shape) - 1, -1, -1):
        old_n *= shape[d]
        if d == 0 or (shape[d - 1] != 1 and strides[d - 1] != old_n * base):
            while k >= 0 and (new_n < old_n or shape2[k] == 1):
                out[k] = new_n * base
                new_n *= shape2[k]
                k -= 1
            if new_n != old_n:
                return None
            if d > 0:
                base, old_n, new_n = strides[d - 1], 1, 1
    return tuple(out) if k == -1 else None


def transpose(ndim, a, b):
    """The dims order of t.transpose(a, b) (negative dims count from the
    end); raises BadArgumentError (EINVAL) for a dim out of range."""
    if not (-ndim <= a < ndim and -ndim <= b < ndim) and ndim:
        raise _bad(protocol.EINVAL, "transpose: dims (%d, %d) out of range "
                   "for %d dims" % (a, b, ndim))
    dims = list(range(ndim))
    if ndim:
        dims[a % ndim], dims[b % ndim] = dims[b % ndim], dims[a % ndim]
    return dims


def expand(shape, strides, sizes):
    """(shape, strides) of t.expand(*sizes): new leading dims and dims of
    size 1 grow with stride 0, -1 keeps a dim. Raises BadArgumentError
    (ESHAPE) for a dim that is neither 1 nor the size asked for."""
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    sizes = [int(s) for s in sizes]
    lead = len(sizes) - len(shape)
    if lead < 0:
        raise _bad(protocol.ESHAPE, "expand: %s has fewer dims than the "
                   "tensor's %s" % (tuple(sizes), tuple(shape)))
    out_shape, out_strides = [], []
    for i, s in enumerate(sizes):
        if i < lead:
            if s < 0:
                raise _bad(protocol.ESHAPE, "expand: -1 for a new dim %d" % i)
            out_shape.append(s)
            out_strides.append(0)
            continue
        d, st = shape[i - lead], strides[i - lead]
        if s == -1 or s == d:
            out_shape.append(d)
            out_strides.append(st)
        elif d == 1 and s >= 0:
            out_shape.append(s)
            out_strides.append(0)
        else:
            raise _bad(protocol.ESHAPE, "expand: dim %d of size %d cannot "
                       "become %d (only size-1 dims expand)" % (i, d, s))
    return tuple(out_shape), tuple(out_strides)
