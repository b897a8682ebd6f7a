"""opd.tensor: Tensor, a typed view of shared memory, and dtype helpers.

DESIGN
A Tensor is (arena, byte offset, dtype, shape, strides in elements) plus
`_mem`, the object that keeps its memory alive: the allocator Block for a
tensor a Client made (its space is reused once every Tensor, view and
numpy array using it is gone), or the Arena itself for a tensor received
from another process. Views (indexing with steps, view/reshape, permute,
transpose, .T, expand) share `_mem` and carry strides, which runs send. Tensors never know a connection: any Client can run an operator
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

Tensors in the daemon: a Tensor whose arena is a memory.RemoteArena
(device memory from c.empty(..., device="cuda"), an attached published
tensor, an imported torch CUDA storage) has no address here (.device
says where it is). Views work as usual; numpy(), tobytes() and cpu()
COPY it through the daemon's copy op, run by the connection that owns
it; torch() of a device tensor the package allocated is a zero-copy
torch CUDA view (the daemon exports the arena as a CUDA VMM fd, mapped
here by _cuda.py), else a copy; it does not pickle (device memory
belongs to one connection: publish it, or send t.cpu()).

The connection a copy falls back to when a tensor names none is the
process's default client (opd.client()); mp.py, which makes it and sits
above client.py, hands its getter to set_default_client() when imported
(the package's __init__ imports it), so this module imports neither.
"""
import ctypes
import os

from . import _views, errors, memory, protocol

# dtype name -> __array_interface__ typestr (bfloat16 has no numpy type:
# it shows as 2-byte void)
_TYPESTR = {"float32": "<f4", "float16": "<f2", "bfloat16": "|V2",
            "float64": "<f8", "int8": "|i1", "uint8": "|u1", "int32": "<i4",
            "int64": "<i8", "bool": "|b1"}

DTYPES = tuple(n for n, _, _ in protocol.DTYPES)
_warned_copy = []   # Tensor.torch() warned once that it copies


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


def device_name(device, auto=False):
    """Returns the opd device name for `device`: "cpu", or "cuda:N" for
    "cuda", "cuda:N", a torch.device or an int N; "auto" too if auto.
    Raises BackendError (EDEVICE) for anything else."""
    if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
        return "cuda:%d" % device
    s = str(device)
    if s == "cpu" or (auto and s == "auto"):
        return s
    if s == "cuda":
        return "cuda:0"
    if s.startswith("cuda:") and s[5:].isdigit():
        return "cuda:%d" % int(s[5:])
    raise errors.error(protocol.EDEVICE, "unknown device %r: use \"cpu\", "
                       "\"cuda\" or \"cuda:N\"%s" % (device, ", \"auto\""
                                                   if auto else ""))


def _client_of(t, client=None):
    """The connection that copies tensor t: `client`, else the one owning
    its daemon memory, else the one that allocated it, else opd.client()."""
    if client is not None:
        return client
    ref = getattr(t.arena, "client", None)          # a RemoteArena
    if ref is not None:
        c = ref()
        if c is None or c.closed:
            raise errors.error(protocol.ECLOSED, "the connection that owns "
                               "this %s tensor is closed: its daemon memory "
                               "is gone" % t.arena.device)
        return c
    alloc = getattr(t._mem, "alloc", None)          # an allocator Block
    owner = getattr(alloc, "owner", None)
    if owner is not None:
        c = owner()
        if c is not None and not c.closed:
            return c
    return _default_client()


def _no_default_client():
    raise errors.error(protocol.ESTATE, "opd.tensor: no default client "
                       "(import opd, whose mp.py provides opd.client())")


_default_client = _no_default_client


def set_default_client(getter):
    """Sets the function that returns the process's default Client (mp.py's
    client), used by copies of tensors no connection owns. Returns None."""
    global _default_client
    _default_client = getter


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
    """A tensor in shared memory, or in the daemon's memory (device).
    Attributes: shape (tuple), dtype (name, e.g. "float32"), strides
    (elements), itemsize, nbytes, ndim, size, offset (bytes into its
    arena), arena, device ("cpu" or "cuda:N"). Make them with
    Client.empty, zeros, from_numpy (device= for device tensors), or get
    them from an operator."""
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

    @property
    def device(self):
        """Where the elements are: "cpu" or "cuda:N"."""
        return self.arena.device

    @property
    def is_cuda(self):
        """True for a tensor in CUDA device memory."""
        return self.arena.device != "cpu"

    @property
    def readonly(self):
        """True for an attached published tensor (outputs into it are
        refused with EREADONLY)."""
        return self.arena.readonly

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
        """Returns the address of element 0 in this process. Raises
        BackendError (EDEVICE) for a tensor in the daemon's memory, which
        has no address here."""
        base = self.arena.base
        if base is None:
            raise errors.error(protocol.EDEVICE, "this tensor is in the "
                               "daemon's memory (%s) and has no address in "
                               "this process; t.cpu() or t.numpy() copies it"
                               % self.arena.device)
        return base + self.offset

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self):
        dev = self.arena.device
        return "opd.Tensor(shape=%s, dtype=%s%s%s)" % (
            self.shape, self.dtype, "" if dev == "cpu" else ", device=" + dev,
            ", read-only" if self.arena.readonly else "")

    # ---- views -----------------------------------------------------------
    # Views share the memory and carry strides (opd._views has the rules);
    # every op takes them: the daemon copies a strided tensor around a
    # kernel that needs a contiguous one, in the same run (docs/python.md).
    def _view(self, off, shape, strides):
        return Tensor(self.arena, self.offset + off * self.itemsize,
                      self.dtype, shape, strides, self._mem)

    def __getitem__(self, idx):
        """t[...] with ints, slices of any step >= 1, ... and None, as
        numpy's basic indexing: a view. Raises IndexError / TypeError for
        other indices, BadArgumentError (EINVAL) for a step < 1."""
        return self._view(*_views.index(self.shape, self.strides, idx))

    def view(self, *shape):
        """Returns a view with a new shape (one dim may be -1), as
        torch.Tensor.view: it splits and merges only dims that are
        contiguous with each other. Raises BadArgumentError (ESHAPE: the
        sizes differ; ELAYOUT: no strides express it, copy first)."""
        shape = _views.new_shape(self.size, shape)
        strides = _views.view_strides(self.shape, self.strides, shape)
        if strides is None:
            raise errors.error(protocol.ELAYOUT, "view: shape %s of a tensor "
                               "with strides %s needs a copy (client.copy(t) "
                               "first)" % (shape, self.strides))
        return Tensor(self.arena, self.offset, self.dtype, shape, strides,
                      self._mem)

    reshape = view   # torch's reshape copies where view cannot; here: copy()

    def permute(self, *dims):
        """Returns a strided view with dims reordered (no copy)."""
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        if sorted(d % self.ndim for d in dims) != list(range(self.ndim)):
            raise errors.error(protocol.EINVAL, "permute: %s is not a "
                               "permutation of %d dims" % (dims, self.ndim))
        dims = [d % self.ndim for d in dims]
        return Tensor(self.arena, self.offset, self.dtype,
                      [self.shape[d] for d in dims],
                      [self.strides[d] for d in dims], self._mem)

    def transpose(self, a, b):
        """Returns the strided view with dims a and b swapped."""
        return self.permute(_views.transpose(self.ndim, a, b))

    @property
    def T(self):
        """The view with dims reversed (a strided view)."""
        return self.permute(*reversed(range(self.ndim)))

    def unsqueeze(self, dim):
        """Returns the view with a new dim of size 1 at dim (negative dims
        count from the end, as torch's)."""
        d = dim % (self.ndim + 1) if -self.ndim - 1 <= dim <= self.ndim else None
        if d is None:
            raise errors.error(protocol.EINVAL, "unsqueeze: dim %d out of range "
                               "for %d dims" % (dim, self.ndim))
        return self[(slice(None),) * d + (None,)]

    def contiguous(self, client=None):
        """Returns self if it is C-contiguous, else a contiguous copy made
        by the daemon's copy op (on `client`, else the connection that owns
        or allocated the tensor, else opd.client())."""
        if self.is_contiguous():
            return self
        return _client_of(self, client).copy(self)

    def expand(self, *sizes):
        """Returns the view broadcast to sizes (torch.Tensor.expand: new
        leading dims and size-1 dims get stride 0, -1 keeps a dim). Such a
        view is an input only (an output needs one address per element)."""
        shape, strides = _views.expand(self.shape, self.strides, sizes)
        return Tensor(self.arena, self.offset, self.dtype, shape, strides,
                      self._mem)

    # ---- bytes, numpy ----------------------------------------------------
    def _extent(self):
        if self.size == 0:
            return 0
        return (1 + sum((d - 1) * s for d, s in zip(self.shape, self.strides))) * self.itemsize

    def tobytes(self):
        """Returns the elements as bytes (C order); needs a contiguous
        tensor (numpy is not required). A tensor in the daemon is copied
        here first."""
        if self.arena.base is None:
            return self.cpu().tobytes()
        if not self.is_contiguous():
            raise errors.error(protocol.ELAYOUT, "tobytes needs a contiguous tensor")
        return ctypes.string_at(self.data_ptr(), self.nbytes)

    def copy_from_bytes(self, data):
        """Copies len(data) == nbytes bytes into a contiguous tensor. Returns self."""
        data = memoryview(data).cast("B")
        if self.arena.base is None and len(data) == self.nbytes:
            c = _client_of(self)
            c.run("copy", c.empty(self.shape, self.dtype).copy_from_bytes(data),
                  out=self)
            return self
        if len(data) != self.nbytes or not self.is_contiguous():
            raise errors.error(protocol.ESHAPE, "copy_from_bytes: %d bytes into "
                               "%d (contiguous needed)" % (len(data), self.nbytes))
        ctypes.memmove(self.data_ptr(), (ctypes.c_char * len(data)).from_buffer_copy(data),
                       len(data))
        return self

    @property
    def __array_interface__(self):
        """numpy's array interface: np.asarray(t) is a zero-copy view that
        keeps t alive. Absent for a tensor in the daemon (numpy then calls
        __array__, which copies)."""
        if self.arena.base is None:
            raise AttributeError("__array_interface__: the tensor is in the "
                                 "daemon's memory (%s)" % self.arena.device)
        return {"version": 3, "shape": self.shape,
                "typestr": _TYPESTR[self.dtype],
                "data": (self.data_ptr(), False),
                "strides": None if self.is_contiguous() else
                tuple(s * self.itemsize for s in self.strides)}

    def __array__(self, dtype=None, copy=None):
        import numpy as np
        if self.arena.base is None:
            if copy is False:
                raise ValueError("a tensor in the daemon's memory (%s) cannot "
                                 "be viewed by numpy without a copy"
                                 % self.arena.device)
            a = np.asarray(self.cpu())
        else:
            a = np.asarray(self)
        return a if dtype is None else a.astype(dtype, copy=False)

    def numpy(self):
        """Returns the elements as a numpy array. A host tensor: a zero-copy,
        writable view (its base keeps this tensor alive). A tensor in the
        daemon's memory (a device tensor, an attached one): a host COPY
        made through the daemon; writing it does not change the tensor.
        Raises ImportError without numpy."""
        import numpy as np
        if self.arena.base is None:
            return np.asarray(self.cpu())
        return np.asarray(self)

    # ---- devices ---------------------------------------------------------
    def to(self, device, client=None):
        """Returns this tensor on `device` ("cpu", "cuda", "cuda:N"): self if
        it is already there, else a new contiguous copy made by the
        daemon's copy op (host to device, device to host). client: the
        connection that makes the copy and owns a new device tensor
        (default: the one owning this tensor's daemon memory, else the one
        that allocated it, else opd.client())."""
        dev = device_name(device)
        if dev == self.arena.device and (dev != "cpu" or self.arena.base is not None):
            return self
        c = _client_of(self, client)
        out = c.empty(self.shape, self.dtype, dev)
        if self.size:
            c.run("copy", self, out=out)
        return out

    def cpu(self, client=None):
        """Returns this tensor in host shared memory: self for a host tensor,
        else a copy (see to)."""
        return self.to("cpu", client)

    def cuda(self, index=0, client=None):
        """Returns this tensor on cuda:index: self if it is there, else a
        copy in the daemon's device memory (see to)."""
        return self.to("cuda:%d" % index if isinstance(index, int) else index,
                       client)

    def torch(self):
        """Returns a torch tensor with these elements. A host tensor: a
        zero-copy CPU view (torch.from_dlpack; it keeps this tensor alive;
        a bool tensor goes through a uint8 view, which torch versions
        without DLPack's kDLBool, 1.13 among them, accept).
        A device tensor made by c.empty(..., device=...) (or any operator
        output on a device): a ZERO-COPY torch CUDA view of the daemon's
        memory (the arena is exported as a CUDA VMM fd and mapped here
        once per connection; the view keeps the mapping and this tensor
        alive, and stays valid after the client closes). Making the view
        waits for this client's asynchronous runs (Client.synchronize);
        from then on runs touching tensors with live views are ordered
        with torch's current stream on the GPU, both ways (docs/async.md).
        Falls back to a COPY into a new torch CUDA tensor (one
        device-to-device copy by the daemon, with a RuntimeWarning once)
        when the daemon cannot export (no CUDA VMM, an older daemon or
        libopd); an attached or torch-imported device tensor, and an
        attached host tensor, are always copied. Raises ImportError
        without torch, BackendError (EBACKEND) if libcuda.so.1 or a
        mapping call fails."""
        import torch
        if self.arena.base is not None:
            if self.dtype == "bool":   # DLPack < 0.8 (torch 1.13): no kDLBool
                return torch.from_dlpack(Tensor(
                    self.arena, self.offset, "uint8", self.shape,
                    self.strides, self._mem)).view(torch.bool)
            return torch.from_dlpack(self)
        if self.arena.device == "cpu":
            return self.cpu().torch()
        c = _client_of(self)
        if self.arena.kind == "alloc":
            c._settle()   # asynchronous runs on it, done before torch reads
            v = c._torch_view(self)
            if v is not None:
                return v
            if not _warned_copy:
                _warned_copy.append(True)
                import warnings
                warnings.warn("opd: the daemon cannot export this device "
                              "memory (no CUDA VMM, or an older daemon/"
                              "libopd): Tensor.torch() returns a copy",
                              RuntimeWarning, stacklevel=2)
        out = torch.empty(self.shape, dtype=getattr(torch, self.dtype),
                          device=self.arena.device)
        if self.size:
            c.run("copy", self, out=out)
        return out

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
        if self.arena.base is None:
            raise BufferError("opd: this tensor is in the daemon's memory (%s); "
                              "no zero-copy export yet: use t.torch() or "
                              "t.cpu() (copies)" % self.arena.device)
        from . import _dlpack
        return _dlpack.to_capsule(self)

    def __dlpack_device__(self):
        """Returns (1, 0): kDLCPU, device 0; (2, N) (kDLCUDA) for a device
        tensor, whose __dlpack__ refuses (no export yet)."""
        dev = self.arena.device
        return (1, 0) if dev == "cpu" else (2, int(dev[5:]))

    # ---- pickling --------------------------------------------------------
    def __reduce__(self):
        a = self.arena
        if a.base is None:
            raise TypeError("an opd tensor in the daemon's memory (%s, %s) "
                            "cannot be pickled: it belongs to one connection; "
                            "publish it (c.publish) and attach it in the other "
                            "process, or send t.cpu()" % (a.kind, a.device))
        return (_rebuild, (os.getpid(), a.fd, a.key, a.size, self.offset,
                           self.dtype, self.shape, self.strides))


def _rebuild(pid, fd, key, size, offset, dtype, shape, strides):
    arena = memory.open_shared(pid, fd, key, size)
    return Tensor(arena, offset, dtype, shape, strides, arena)


def view_of_array(a):
    """The Tensor over ndarray a's own memory when a is numpy's view of a
    host Tensor (np.asarray(t), t.numpy(), and numpy views of those:
    slices with steps, .T, transposes, broadcasts), with a's strides; None
    for any other array (its bytes are not in an arena), a bfloat16 view
    (no numpy dtype) or negative strides."""
    b = a
    while b is not None and not isinstance(b, Tensor):
        b = getattr(b, "base", None)
    if b is None or b.arena.base is None:
        return None
    try:
        dt = dtype_name(a.dtype)
    except errors.OpdError:
        return None
    size = protocol.DTYPE_SIZES[dt]
    if any(st < 0 or st % size for st in a.strides):
        return None
    off = a.ctypes.data - b.arena.base
    span = (1 + sum((d - 1) * st // size for d, st in zip(a.shape, a.strides))
            if 0 not in a.shape else 0) * size
    if off < 0 or off % size or off + span > b.arena.size:
        return None
    return Tensor(b.arena, off, dt, a.shape, [st // size for st in a.strides], b._mem)


def share_reference(t):
    """Returns the tuple a pickled Tensor carries: (pid, fd, (st_dev,
    st_ino), arena size, offset, dtype, shape, strides)."""
    return t.__reduce__()[1]


def from_reference(ref):
    """Returns the Tensor for a share_reference() tuple, mapping the arena
    if needed. Raises BadArgumentError (EARENA) if it cannot be opened."""
    return _rebuild(*ref)
