"""opd._runner: a run's arguments as libopd takes them, and their caches.

DESIGN
Runner, held by its Client as `_runner`, turns what run(), submit(),
prepare(), infer() and the generated operator methods are given into
libopd's arguments, and owns the caches that make a repeated call cheap
(infer_cache, desc_arrays, op_bytes, the run memo) and `unsynced`, the
flag of asynchronous runs sent since the last synchronize(). It reaches
the connection through its Client (handle, token, lib, empty,
from_numpy), arena ids through the Arenas part, torch tensors through
the TorchInterop part and schemas through the Ops part.

prepare() converts inputs (a numpy array is copied into a new shared
tensor, a torch tensor through from_torch), converts attributes using the
schema's types (attrs), asks opd_infer for the output shapes (infer:
cached by op, input dtypes/shapes and attributes), allocates the outputs
from the client's Allocator on the device of the device-tensor inputs,
builds the descriptors (desc: cached per tensor and connection;
desc_array: arrays of several, cached by the descriptors) and returns a
Run, the record of libopd's arguments and what they keep alive. run() is
the body of Client.run and of every generated operator method: from the
run memo when the call is the memo's, else through prepare() and
execute() (ctypes releases the GIL, so threads overlap their requests).
execute() picks how the run is sent: ordered with torch's current stream
when torch's memory or a live torch view is in it (opd_run_stream),
asynchronous when any tensor is in device memory (opd_run_async:
answered once enqueued; `unsynced` is set, which synchronize(), publish()
and a new torch view settle), else plain opd_run.
"""
import ctypes
import numbers
import operator
import weakref

from . import _lib, errors, memory, protocol
from ._torch import _is_torch
from .errors import check
from .tensor import Tensor, device_name, dtype_name, view_of_array

_DT = protocol.DTYPE_CODES
_AT = protocol.ATTR_TYPE_CODES


class Run:
    """One run's arguments as libopd takes them (after the connection's
    handle h: op, in_arr, n_in, out_arr, n_out, attr_arr, n_attrs) and
    what they need alive and say: the inputs and outputs (opd Tensors),
    keep (the attribute buffers), torch_dev (a torch CUDA device whose
    memory or views are in it, else None) and on_dev (a tensor in device
    memory)."""
    __slots__ = ("h", "op", "in_arr", "n_in", "out_arr", "n_out", "attr_arr",
                 "n_attrs", "ins", "outs", "keep", "torch_dev", "on_dev")

    def __init__(self, h, op, in_arr, n_in, out_arr, n_out, attr_arr, n_attrs,
                 ins, outs, keep, torch_dev, on_dev):
        self.h, self.op, self.in_arr, self.n_in = h, op, in_arr, n_in
        self.out_arr, self.n_out = out_arr, n_out
        self.attr_arr, self.n_attrs = attr_arr, n_attrs
        self.ins, self.outs, self.keep = ins, outs, keep
        self.torch_dev, self.on_dev = torch_dev, on_dev

    def c_args(self):
        """(op, in_arr, n_in, out_arr, n_out, attr_arr, n_attrs): libopd's
        arguments after the handle (and device)."""
        return (self.op, self.in_arr, self.n_in, self.out_arr, self.n_out,
                self.attr_arr, self.n_attrs)


class _Memo:
    """A run memo entry (see Runner.run): the connection it was made on,
    the inputs and outputs (weakly), the device and attributes asked
    for, libopd's arguments after the handle (c_args) and device bytes
    (devb), the attribute buffers they use (keep), the encoded request
    (prep: an _Encoded, from the second call on) and whether the run is
    asynchronous (on_dev)."""
    __slots__ = ("token", "ins", "outs", "device", "attrs", "c_args", "devb",
                 "keep", "prep", "on_dev")

    def __init__(self, token, ins, outs, device, attrs, c_args, devb, keep,
                 on_dev):
        self.token, self.ins, self.outs = token, ins, outs
        self.device, self.attrs = device, attrs
        self.c_args, self.devb, self.keep = c_args, devb, keep
        self.prep, self.on_dev = None, on_dev


class Runner:
    """A connection's argument conversion, caches and run memo."""

    def __init__(self, client, arenas, torch, ops):
        self._c, self._arenas, self._torch, self._ops = client, arenas, torch, ops
        self.infer_cache = {}          # (op, inputs, attrs) -> output specs
        self.desc_arrays = {}          # descriptors -> their ctypes array
        self.memo = {}                 # (op, id(out)) -> _Memo
        self.op_bytes = {}             # op name -> its bytes
        self.unsynced = False          # async runs sent since synchronize()
        self.run_async = None          # libopd's opd_run_async (False: none)

    def reset(self):
        """Forgets what belonged to the previous connection."""
        self.memo.clear()
        self.unsynced = False

    # ---- descriptors ---------------------------------------------------------
    def desc(self, t):
        d = t._descs
        token = self._c._token
        if d is not None and d[0] is token:
            return d[1]
        n = len(t.shape)
        if n > protocol.MAX_RANK:
            raise errors.error(protocol.ELIMIT, "rank %d out of 0..%d"
                               % (n, protocol.MAX_RANK))
        desc = _lib.TensorDesc()
        desc.arena = self._arenas.arena_id(t.arena)
        desc.offset = t.offset
        desc.dtype = _DT[t.dtype]
        desc.rank = n
        desc.shape[:n] = t.shape
        if not t.is_contiguous():
            desc.strided = 1
            desc.strides[:n] = t.strides
        t._descs = (token, desc)
        return desc

    def desc_array(self, ts):
        """The descriptors of tensors ts as libopd takes them (a pointer to
        the first of n): one descriptor as itself (ctypes passes its
        address), several as an array, cached by the descriptors (each
        Tensor keeps its own, so a loop over the same tensors builds no
        array)."""
        if not ts:
            return None
        if len(ts) == 1:
            return self.desc(ts[0])
        descs = [self.desc(t) for t in ts]
        key = tuple(map(id, descs))   # the entry keeps descs alive: ids hold
        hit = self.desc_arrays.get(key)
        if hit is None:
            if len(self.desc_arrays) >= 256:
                self.desc_arrays.clear()
            hit = self.desc_arrays[key] = ((_lib.TensorDesc * len(descs))(*descs),
                                           descs)
        return hit[0]

    # ---- inputs and attributes -----------------------------------------------
    def convert(self, x):
        """An opd Tensor for x: a torch tensor's (from_torch), numpy's view
        of a host Tensor's memory as it is (its strides kept, no copy),
        else a copy of an array-like (from_numpy)."""
        if _is_torch(x):
            return self._torch.from_torch(x)
        if type(x).__name__ == "ndarray":
            t = view_of_array(x)
            if t is not None:
                return t
        return self._c.from_numpy(x)

    def attrs(self, schema, kw):
        if not kw:
            return None, (), ()
        types_ = {a["name"]: a["type"] for a in schema["attrs"]} if schema else {}
        arr = (_lib.AttrDesc * len(kw))()
        keep, key = [], []
        for i, (name, v) in enumerate(kw.items()):
            a = arr[i]
            nb = name.encode()
            keep.append(nb)
            a.name = nb
            want = types_.get(name)
            if isinstance(v, (bool,)) or type(v).__name__ == "bool_":
                a.type, a.i = _AT["bool"], int(bool(v))
                val = bool(v)
            elif isinstance(v, str):
                if want == "ints" and types_.get(name + "_mode") == "str":
                    # torch's padding="same": the op's str twin attr
                    # (conv2d's padding_mode)
                    name += "_mode"
                    if name in kw:
                        raise errors.error(protocol.EATTR, "attribute %s given "
                                           "twice (also as %s)" % (name, name[:-5]))
                    nb = name.encode()
                    keep.append(nb)
                    a.name = nb
                sb = v.encode()
                keep.append(sb)
                a.type, a.s = _AT["str"], sb
                val = v
            elif isinstance(v, (list, tuple)):
                vals = [operator.index(x) for x in v]
                if not 1 <= len(vals) <= protocol.MAX_RANK:
                    raise errors.error(protocol.EATTR, "attribute %s: %d ints, "
                                       "expected 1..%d" % (name, len(vals),
                                                           protocol.MAX_RANK))
                a.type, a.n = _AT["ints"], len(vals)
                a.ints[:len(vals)] = vals
                val = tuple(vals)
            elif hasattr(v, "__index__") and want != "float":
                if want == "ints":
                    a.type, a.n = _AT["ints"], 1
                    a.ints[0] = operator.index(v)
                else:
                    a.type, a.i = _AT["int"], operator.index(v)
                val = operator.index(v)
            elif isinstance(v, numbers.Real):
                a.type, a.f = _AT["float"], float(v)
                val = float(v)
            else:
                raise errors.error(protocol.EATTR, "attribute %s: %r is not "
                                   "an int, float, bool, str or list of ints"
                                   % (name, v))
            key.append((name, a.type, val))
        return arr, keep, tuple(key)


    def prepare(self, op, inputs, out, attrs, device):
        """The Run of these arguments, the outputs (given, or new ones) and
        the device as bytes (None: the daemon's auto)."""
        c, ti = self._c, self._torch        # ti: the TorchInterop part
        h = c._handle()
        ins = list(inputs)
        while ins and ins[-1] is None:        # optional trailing inputs
            ins.pop()
        torch_dev = None                      # a torch CUDA tensor's device
        odev = "cpu"                          # where new outputs go
        on_dev = False                        # a tensor in device memory
        maps = ti.maps
        scalar_dt = None                      # a Python number's dtype
        numbers = _is_number if any(_is_float_array(x) for x in ins) else _is_python
        for i, x in enumerate(ins):
            if numbers(x):                    # torch's rule: a number takes
                if scalar_dt is None:         # the tensors' float dtype
                    scalar_dt = _scalar_dtype(ins)
                ins[i] = x = self._c.from_numpy(_np().asarray(_number(op, i, x),
                                                              scalar_dt))
            if type(x) is not Tensor:
                if x is None:
                    raise errors.error(protocol.EINVAL, "%s: input %d is None "
                                       "but a later input is given" % (op, i))
                if not isinstance(x, Tensor):
                    if _is_torch(x) and x.is_cuda:
                        torch_dev = x.device
                    ins[i] = x = self.convert(x)
            if maps and ti.viewed(x):
                torch_dev = x.arena.device        # torch may use its view
            if odev == "cpu":
                odev = x.arena.device
                on_dev = odev != "cpu"
        devb = None
        if device is not None:
            dev = device_name(device, auto=True)
            if dev == "cpu":
                odev = "cpu"
            devb = dev.encode()
        if attrs:
            attr_arr, keep, akey = self.attrs(self._ops.schema(op), attrs)
        else:
            attr_arr, keep, akey = None, (), ()
        ob = self.op_bytes.get(op)
        if ob is None:
            ob = self.op_bytes[op] = op.encode()
        if out is None:
            spec = self.infer(h, ob, ins, attr_arr, akey)
            ret = outs = tuple([c.empty(shape, dt, odev) for dt, shape in
                                spec]) if spec else ()
            on_dev = on_dev or (odev != "cpu" and bool(outs))
        else:
            ret = tuple(out) if isinstance(out, (list, tuple)) else (out,)
            outs = []
            for o in ret:
                if type(o).__name__ == "ndarray" and view_of_array(o) is not None:
                    o = view_of_array(o)          # numpy's view of an arena
                if not isinstance(o, Tensor):
                    if not (_is_torch(o) and o.is_cuda):
                        raise errors.error(protocol.EINVAL, "%s: an output must "
                                           "be an opd Tensor or a torch CUDA "
                                           "tensor, not %s (CPU torch tensors "
                                           "are not in shared memory)"
                                           % (op, type(o).__name__))
                    torch_dev = o.device
                    o = ti.from_torch_cuda(o)
                elif ti.maps and ti.viewed(o):
                    torch_dev = o.arena.device
                if not on_dev:
                    on_dev = o.arena.device != "cpu"
                outs.append(o)
            outs = tuple(outs)
        n_in, n_out = len(ins), len(outs)
        in_arr = self.desc_array(ins)
        out_arr = self.desc_array(outs)
        return Run(h, ob, in_arr, n_in, out_arr, n_out, attr_arr, len(attrs),
                   ins, outs, keep, torch_dev, on_dev), ret, devb

    def execute(self, r, devb):
        """Runs Run r: in torch's stream order when torch's memory or live
        torch views are involved (run_ordered), else asynchronously when
        a tensor is in device memory (answered once enqueued; settled by
        synchronize() or a host read), else plainly. Returns libopd's
        code."""
        if r.torch_dev is not None:
            idx = cuda_index(r.torch_dev)
            return self._torch.run_ordered(r.h, ("cuda:%d" % idx).encode(), idx,
                                           *r.c_args())
        lib = self._c._lib
        if r.on_dev:
            fn = self.run_async
            if fn is None:
                fn = self.run_async = getattr(lib, "opd_run_async", False)
            if fn:
                self.unsynced = True
                return fn(r.h, devb, *r.c_args())
        if devb is None:
            return lib.opd_run(r.h, r.op, r.in_arr, r.n_in, r.out_arr, r.n_out,
                               r.attr_arr, r.n_attrs)
        return self._c._need("opd_run_on")(r.h, devb, *r.c_args())

    def infer(self, h, ob, ins, attr_arr, akey):
        """[(dtype, shape)] of the outputs (opd_infer, cached)."""
        key = (ob, tuple([(t.dtype, t.shape) for t in ins]), akey)
        r = self.infer_cache.get(key)
        if r is not None:
            return r
        n = len(ins)
        in_arr = (_lib.TensorDesc * n)(*[self.desc(t) for t in ins]) if n else None
        outs = (_lib.TensorDesc * protocol.MAX_TENSORS)()
        n_out = ctypes.c_uint32()
        check(self._c._lib.opd_infer(h, ob, in_arr, n, attr_arr, len(akey), outs,
                                  protocol.MAX_TENSORS, ctypes.byref(n_out)))
        r = tuple((protocol.DTYPE_NAMES[o.dtype], tuple(o.shape[:o.rank]))
                  for o in outs[:n_out.value])
        if len(self.infer_cache) > 4096:
            self.infer_cache.clear()
        self.infer_cache[key] = r
        return r


    # ---- the run and its memo ------------------------------------------------
    def run(self, op, inputs, out, device, attrs):
        """Client.run's body: the outputs (see there)."""
        m = self.memo.get((op, id(out)))
        if (m is not None and m.token is self._c._token and
                m.device == device and m.attrs == attrs):
            hit = self._memo_run(m, inputs, out)
            if hit is not _MISS:
                return hit
        r, outs, devb = self.prepare(op, inputs, out, attrs, device)
        rc = self.execute(r, devb)
        if rc:
            check(rc)
        if out is not None or not outs:
            self._memo_store(op, inputs, out, device, attrs, r, outs, devb)
        if len(outs) == 1:
            return outs[0]
        return outs if outs else None

    # A loop that calls run() (c.softmax(x, out=y)) with the same opd
    # Tensors, attributes and device each time reuses what prepare built
    # the first time, and from the second call on a request libopd encoded
    # once (as Client.prepare does). The memo, per (op, id(out)), holds the
    # tensors weakly and is used only while each argument is the very
    # object it was made for and the connection the same. Numpy inputs
    # (copied in per call), torch tensors and torch views (synced per call)
    # and new outputs (out=None for an op that has outputs) always take the
    # full path.
    _MEMO_MAX = 16

    def _memo_store(self, op, inputs, out, device, attrs, r, outs, devb):
        if self._torch.maps or r.torch_dev is not None:
            return
        for v in attrs.values():   # compared by ==: immutable values only
            t = type(v)
            if t is tuple:
                for e in v:
                    if type(e) not in _MEMO_SCALARS:
                        return
            elif t not in _MEMO_SCALARS:
                return
        for x in inputs:
            if type(x) is not Tensor:
                return
        for o in outs:
            if type(o) is not Tensor:
                return
        memo = self.memo
        if len(memo) >= self._MEMO_MAX:
            memo.clear()
        memo[(op, id(out))] = _Memo(
            self._c._token, tuple([weakref.ref(x) for x in inputs]),
            tuple([weakref.ref(o) for o in outs]), device, dict(attrs),
            r.c_args(), devb, r.keep, r.on_dev)

    def _memo_run(self, m, inputs, out):
        c = self._c
        refs, orefs = m.ins, m.outs
        h = c._h
        if (len(inputs) != len(refs) or h is None or self._arenas.pending or
                c._gen != memory._fork_gen[0] or self._torch.maps):
            return _MISS
        for r, x in zip(refs, inputs):
            if r() is not x:
                return _MISS
        if type(out) is Tensor:
            if len(orefs) != 1 or orefs[0]() is not out:
                return _MISS
            res = out
        elif out is None or type(out) is tuple or type(out) is list:
            outs = () if out is None else tuple(out)
            if len(outs) != len(orefs):
                return _MISS
            for r, o in zip(orefs, outs):
                if r() is not o:
                    return _MISS
            res = outs[0] if len(outs) == 1 else (outs if outs else None)
        else:
            return _MISS
        prep = m.prep
        if prep is None:
            p = ctypes.c_void_p()
            flags = OPD_RUN_ASYNC if m.on_dev else 0
            check(prepare_flags(c, h, m.devb, m.c_args, flags, p))
            prep = m.prep = _Encoded(p, c._need("opd_prepared_free"),
                                     c._need("opd_run_prepared"))
        if m.on_dev:
            self.unsynced = True
        rc = prep.run(h, prep.p)
        if rc:
            check(rc)
        return res


_MISS = object()   # _memo_run: not the memo's call
OPD_RUN_ASYNC, OPD_RUN_STREAM = 0x1, 0x2   # opd_prepare_flags (opd.h)


def cuda_index(dev):
    """The index N of a torch.device or "cuda:N" string (torch's current
    device for a bare "cuda")."""
    idx = getattr(dev, "index", None) if not isinstance(dev, str) else \
        (int(dev[5:]) if dev.startswith("cuda:") else None)
    if idx is None:
        import torch
        idx = torch.cuda.current_device()
    return idx


def prepare_flags(c, h, devb, args, flags, p):
    """opd_prepare_flags(h, devb, *args, flags, &p), or opd_prepare for
    flags 0 or a libopd without it (the run is then answered when done)."""
    fn = getattr(c._lib, "opd_prepare_flags", None) if flags else None
    if fn is None:
        return c._need("opd_prepare")(h, devb, *args, ctypes.byref(p))
    return fn(h, devb, *args, flags, ctypes.byref(p))
_MEMO_SCALARS = (int, float, bool, str)


class _Encoded:
    """A run request libopd encoded once (opd_prepare), freed with its
    memo entry."""
    __slots__ = ("p", "free", "run")

    def __init__(self, p, free, run):
        self.p, self.free, self.run = p, free, run

    def __del__(self):
        try:
            self.free(self.p)
        except Exception:
            pass


def _np():
    import numpy
    return numpy


def _is_python(x):
    return type(x) in (int, float, bool, complex)


_FLOATS = ("float16", "bfloat16", "float32", "float64")


def _float_name(x):
    """x's dtype name when x is a tensor or array of a float dtype, else
    None."""
    dt = getattr(x, "dtype", None)
    try:
        name = dtype_name(dt) if dt is not None else None
    except Exception:
        return None
    return name if name in _FLOATS else None


def _is_float_array(x):
    return (x is not None and hasattr(x, "shape") and len(x.shape) > 0 and
            _float_name(x) is not None)


def _is_number(x):
    """True for a Python number (bool, int, float, complex) or a numpy
    scalar (np.float64(2), np.bool_(True)): a scalar operand (a numpy
    scalar counts as one beside a float tensor of rank >= 1, else it is
    the 0-d array of its own dtype)."""
    t = type(x)
    return _is_python(x) or (t.__module__ == "numpy" and t.__name__ != "ndarray"
                             and hasattr(x, "dtype"))


def _number(op, i, x):
    """Scalar operand x as a Python float (a complex one refused: no opd
    dtype holds it)."""
    v = x.item() if hasattr(x, "item") else x
    if isinstance(v, complex):
        raise errors.error(protocol.EDTYPE, "%s: input %d is the complex scalar "
                           "%r; opd has no complex dtype (scalar operands may "
                           "be bool, int or float)" % (op, i, v))
    return float(v)


def _scalar_dtype(ins):
    """The dtype a Python number among a run's inputs takes: the first
    tensor's when it is a float dtype (float16, bfloat16, float32,
    float64), else float32 (torch's result_type for a number and a
    tensor)."""
    for x in ins:
        if x is None or _is_number(x):
            continue
        name = _float_name(x)
        if name is not None:
            return "float32" if name == "bfloat16" else name
        return "float32"
    return "float32"
