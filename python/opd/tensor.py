"""opd.tensor: Tensor, a typed view of shared memory, and dtype helpers.

DESIGN
A Tensor is (arena, byte offset, dtype, shape, strides in elements) plus
`_mem`, the object that keeps its memory alive: the allocator Block for a
tensor a Client made (its space is reused once every Tensor, view and
numpy array using it is gone), or the Arena itself for a tensor received
from another process. Views (indexing on dim 0, reshape, permute) share
`_mem`. Tensors never know a connection: any Client can run an operator
on any Tensor (the client registers the arena with its daemon session on
first use).

numpy interop is zero-copy through __array_interface__ (numpy keeps the
Tensor alive as the array's base). __dlpack__ builds a DLManagedTensor
with ctypes (see _dlpack.py), so np.from_dlpack and torch.from_dlpack work
without a compiled extension. Pickling a Tensor yields a small reference
(pid, memfd number, (st_dev, st_ino), arena size, offset, dtype, shape,
strides); unpickling it in another process of the same user opens the
memfd through /proc/<pid>/fd/<fd> and maps the same memory. The sender
must keep the tensor alive until the receiver has unpickled it.
"""
import ctypes
import os

from . import errors, memory, protocol

# dtype name -> __array_interface__ typestr (bfloat16 has no numpy type:
# it shows as 2-byte void)
_TYPESTR = {"float32": "<f4", "float16": "<f2", "bfloat16": "|V2",
            "float64": "<f8", "int8": "|i1", "uint8": "|u1", "int32": "<i4",
            "int64": "<i8", "bool": "|b1"}

DTYPES = tuple(n for n, _, _ in protocol.DTYPES)


def dtype_name(dtype):
    """Returns the opd dtype name ("float32") for a name, a numpy dtype or
    type (np.float32), a torch dtype or an OPD_DTYPE code.
    Raises BadArgumentError (EDTYPE) for anything else."""
    if isinstance(dtype, str):
        if dtype in protocol.DTYPE_CODES:
            return dtype
    elif isinstance(dtype, int) and not isinstance(dtype, bool):
        if dtype in protocol.DTYPE_NAMES:
            return protocol.DTYPE_NAMES[dtype]
    else:
        name = getattr(dtype, "name", None)
        if name is None and isinstance(dtype, type):
            name = getattr(dtype, "__name__", None)
        if dtype is bool:
            name = "bool"
        if name is None and str(dtype).startswith("torch."):
            name = str(dtype)[6:]
        if name == "bool_":
            name = "bool"
        if name in protocol.DTYPE_CODES:
            return name
        try:
            import numpy as np
            name = np.dtype(dtype).name
            if name in protocol.DTYPE_CODES:
                return name
        except Exception:
            pass
    raise errors.error(protocol.EDTYPE, "unsupported dtype %r; opd dtypes "
                       "are %s" % (dtype, ", ".join(DTYPES)))


def contiguous_strides(shape):
    """Returns the C-contiguous strides (in elements) of shape, as a tuple."""
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


def _prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class Tensor:
    """A tensor in shared memory. Attributes: shape (tuple), dtype (name,
    e.g. "float32"), strides (elements), itemsize, nbytes, ndim, size,
    offset (bytes into its arena), arena. Make them with Client.empty,
    zeros, from_numpy, or get them from an operator."""
    __slots__ = ("arena", "offset", "dtype", "shape", "strides", "_mem",
                 "_descs", "_contig", "__weakref__")

    def __init__(self, arena, offset, dtype, shape, strides=None, mem=None):
        self.arena = arena
        self.offset = offset
        self.dtype = dtype
        self.shape = shape = tuple(shape)
        if strides is None:
            self.strides = contiguous_strides(shape)
            self._contig = True
        else:
            self.strides = tuple(strides)
            self._contig = None      # computed on first is_contiguous()
        self._mem = mem if mem is not None else arena
        self._descs = None   # (client serial, conn gen, TensorDesc) cache

    # ---- properties ------------------------------------------------------
    @property
    def itemsize(self):
        """Bytes per element."""
        return protocol.DTYPE_SIZES[self.dtype]

    @property
    def ndim(self):
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self):
        """Number of elements."""
        return _prod(self.shape)

    @property
    def nbytes(self):
        """Bytes of the elements (size * itemsize)."""
        return self.size * self.itemsize

    def is_contiguous(self):
        """Returns True if the tensor is C-contiguous."""
        c = self._contig
        if c is None:
            c = self._contig = self.size <= 1 or all(
                s == cs for d, s, cs in zip(self.shape, self.strides,
                                            contiguous_strides(self.shape))
                if d != 1)
        return c

    def data_ptr(self):
        """Returns the address of element 0 in this process."""
        return self.arena.base + self.offset

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self):
        return "opd.Tensor(shape=%s, dtype=%s)" % (self.shape, self.dtype)

    # ---- views -----------------------------------------------------------
    def __getitem__(self, idx):
        """t[i] drops dim 0; t[a:b] (step 1) narrows it. Both are views.
        Raises IndexError / TypeError for other indices."""
        if not self.shape:
            raise IndexError("a 0-d tensor cannot be indexed")
        n, st0 = self.shape[0], self.strides[0]
        if isinstance(idx, slice):
            a, b, step = idx.indices(n)
            if step != 1:
                raise TypeError("opd tensors support slices of step 1 only; "
                                "use .numpy() for more")
            b = max(a, b)
            return Tensor(self.arena, self.offset + a * st0 * self.itemsize,
                          self.dtype, (b - a,) + self.shape[1:],
                          self.strides, self._mem)
        if isinstance(idx, int) or hasattr(idx, "__index__"):
            i = idx.__index__()
            if i < 0:
                i += n
            if not 0 <= i < n:
                raise IndexError("index %d out of range for dim 0 of size %d"
                                 % (idx, n))
            return Tensor(self.arena, self.offset + i * st0 * self.itemsize,
                          self.dtype, self.shape[1:], self.strides[1:],
                          self._mem)
        raise TypeError("opd tensors take an int or a slice on dim 0; use "
                        ".numpy() for more")

    def reshape(self, *shape):
        """Returns a view with a new shape (one dim may be -1). Needs a
        contiguous tensor. Raises BadArgumentError (ESHAPE, ELAYOUT)."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = list(shape)
        if shape.count(-1) > 1:
            raise errors.error(protocol.ESHAPE, "reshape: more than one -1")
        if -1 in shape:
            rest = _prod(d for d in shape if d != -1)
            shape[shape.index(-1)] = self.size // rest if rest else 0
        if _prod(shape) != self.size:
            raise errors.error(protocol.ESHAPE, "reshape: %s has %d elements, "
                               "%s does not" % (self.shape, self.size, tuple(shape)))
        if not self.is_contiguous():
            raise errors.error(protocol.ELAYOUT, "reshape needs a contiguous "
                               "tensor; copy it first (client.copy(t))")
        return Tensor(self.arena, self.offset, self.dtype, shape, None, self._mem)

    def permute(self, *dims):
        """Returns a strided view with dims reordered (no copy). Only `copy`
        accepts non-contiguous inputs; client.copy(t.permute(...)) makes a
        contiguous tensor."""
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        if sorted(d % self.ndim for d in dims) != list(range(self.ndim)):
            raise errors.error(protocol.EINVAL, "permute: %s is not a "
                               "permutation of %d dims" % (dims, self.ndim))
        dims = [d % self.ndim for d in dims]
        return Tensor(self.arena, self.offset, self.dtype,
                      [self.shape[d] for d in dims],
                      [self.strides[d] for d in dims], self._mem)

    @property
    def T(self):
        """The view with dims reversed (a strided view)."""
        return self.permute(*reversed(range(self.ndim)))

    # ---- bytes, numpy ----------------------------------------------------
    def _extent(self):
        if self.size == 0:
            return 0
        return (1 + sum((d - 1) * s for d, s in zip(self.shape, self.strides))) * self.itemsize

    def tobytes(self):
        """Returns the elements as bytes (C order); needs a contiguous
        tensor (numpy is not required)."""
        if not self.is_contiguous():
            raise errors.error(protocol.ELAYOUT, "tobytes needs a contiguous tensor")
        return ctypes.string_at(self.data_ptr(), self.nbytes)

    def copy_from_bytes(self, data):
        """Copies len(data) == nbytes bytes into a contiguous tensor. Returns self."""
        data = memoryview(data).cast("B")
        if len(data) != self.nbytes or not self.is_contiguous():
            raise errors.error(protocol.ESHAPE, "copy_from_bytes: %d bytes into "
                               "%d (contiguous needed)" % (len(data), self.nbytes))
        ctypes.memmove(self.data_ptr(), (ctypes.c_char * len(data)).from_buffer_copy(data),
                       len(data))
        return self

    @property
    def __array_interface__(self):
        """numpy's array interface: np.asarray(t) is a zero-copy view that
        keeps t alive."""
        return {"version": 3, "shape": self.shape,
                "typestr": _TYPESTR[self.dtype],
                "data": (self.data_ptr(), False),
                "strides": None if self.is_contiguous() else
                tuple(s * self.itemsize for s in self.strides)}

    def numpy(self):
        """Returns a zero-copy, writable numpy view (its base keeps this
        tensor alive). Raises ImportError without numpy."""
        import numpy as np
        return np.asarray(self)

    def tolist(self):
        """Returns the elements as nested lists (through numpy)."""
        return self.numpy().tolist()

    # ---- dlpack ----------------------------------------------------------
    def __dlpack__(self, stream=None, *, max_version=None, dl_device=None, copy=None):
        """Returns a "dltensor" PyCapsule (DLPack 0.x DLManagedTensor) that
        views this tensor's memory; the consumer keeps the tensor alive
        until it calls the deleter. Raises BufferError if copy=True is
        asked (opd never copies here)."""
        if copy:
            raise BufferError("opd: __dlpack__ never copies (copy=True asked)")
        from . import _dlpack
        return _dlpack.to_capsule(self)

    def __dlpack_device__(self):
        """Returns (1, 0): kDLCPU, device 0."""
        return (1, 0)

    # ---- pickling --------------------------------------------------------
    def __reduce__(self):
        a = self.arena
        return (_rebuild, (os.getpid(), a.fd, a.key, a.size, self.offset,
                           self.dtype, self.shape, self.strides))


def _rebuild(pid, fd, key, size, offset, dtype, shape, strides):
    arena = memory.open_shared(pid, fd, key, size)
    return Tensor(arena, offset, dtype, shape, strides, arena)


def share_reference(t):
    """Returns the tuple a pickled Tensor carries: (pid, fd, (st_dev,
    st_ino), arena size, offset, dtype, shape, strides)."""
    return t.__reduce__()[1]


def from_reference(ref):
    """Returns the Tensor for a share_reference() tuple, mapping the arena
    if needed. Raises BadArgumentError (EARENA) if it cannot be opened."""
    return _rebuild(*ref)
