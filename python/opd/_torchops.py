"""opd._torchops: the real implementation behind torch.ops.opd.* (opd.torch).

DESIGN
One OpRunner per registered op runs its calls in the daemon with as little
Python per call as it can: torch.py registers the ops, this file runs them.
A call is keyed by its signature: the connection, the attribute values and
each input's (dtype, shape, device). The first call of a signature builds a
_Plan, cached per runner (an LRU of PLANS): the outputs' dtypes and shapes
from the daemon's shape rule (one INFER, then never again for that
signature), the attributes as libopd takes them, the device, output
descriptor templates and, for CPU inputs that are not in shared memory,
staging tensors allocated once and reused by every later call (a copy into
them is all a call pays; the budget STAGE_BYTES bounds what all plans keep).
A call then takes, per input:
  CPU     a tensor whose bytes lie in one of the client's arenas (an earlier
          op's output) is used in place (a descriptor, no copy); any other
          is copied into the plan's staging tensor
  CUDA    a zero-copy view of the daemon's device memory (an earlier op's
          output) is used in place; torch's own memory is used in place
          too, its allocation imported once per connection (libopd's
          opd_tensor_cuda, cuda_desc below); the run is ordered with
          torch's current stream on the GPU (Client._run_ordered: no
          synchronize, the call returns once the daemon enqueued it)
and carves the outputs from the client's allocators (host: a new block of
a reused arena), sends one opd_run_on and returns the outputs as zero-copy
torch views (numpy's array interface and torch.from_numpy, a few
microseconds where torch.from_dlpack through ctypes costs several times
that). On CUDA tensors one libopd call does it all (_call_cuda,
opd_run_stream_ptrs): inputs and outputs are torch's own memory by
pointer (new outputs from torch.empty: torch's caching allocator, on the
current stream), libopd points the descriptors at the allocations it
imported once, and the run is ordered with torch's current stream; the
Python cost of a call is then the arguments, one torch.empty per output
and one ctypes call.
The plan's staging tensors and descriptor templates are used by one call at
a time (plan.lock, taken without blocking); a concurrent call of the same
signature builds its own.

out= and in-place forms (call(..., outs=...)): each given output must have
the dtype and shape of the op's output; one the daemon can write in place
(CPU: contiguous and in an arena; CUDA: contiguous) is written there, any
other gets a temporary output that is copied into it after the run.
"""
import collections
import ctypes
import threading

import torch

from . import _lib, errors, protocol
from ._torch import current_stream
from .tensor import Tensor, dtype_name

try:
    import numpy as _np
except ImportError:          # torch works without numpy: from_dlpack then
    _np = None

PLANS = 32                   # signatures cached per op (LRU)
STAGE_BYTES = 256 << 20      # staging bytes all plans together keep
_staged = [0]                # bytes of staging kept now
_staged_lock = threading.Lock()
_DT = protocol.DTYPE_CODES


def _variadic(schema):
    return schema["max_inputs"] > len(schema["inputs"])


def infer(c, name, schema, ins, attrs, cache):
    """[(torch dtype, shape)] of the outputs, from the daemon's shape rule
    (INFER), cached in `cache` by shapes and attributes. Works on fake
    tensors: only dtypes and shapes are read."""
    specs = []
    for i, t in enumerate(ins):
        if t is None:
            raise errors.error(protocol.EINVAL, "%s: input %d is None but a "
                               "later input is given" % (name, i))
        specs.append((dtype_name(t.dtype), tuple(int(d) for d in t.shape)))
    key = (name, tuple(specs), tuple(sorted((k, tuple(v) if isinstance(v, list)
                                              else v) for k, v in attrs.items())))
    hit = cache.get(key)
    if hit is not None:
        return hit
    h = c._handle()
    descs = (_lib.TensorDesc * max(1, len(specs)))()
    for d, (dt, shape) in zip(descs, specs):
        if len(shape) > protocol.MAX_RANK:
            raise errors.error(protocol.ELIMIT, "%s: rank %d out of 0..%d"
                               % (name, len(shape), protocol.MAX_RANK))
        d.dtype = _DT[dt]
        d.rank = len(shape)
        d.shape[:len(shape)] = shape
    attr_arr, keep, akey = c._runner.attrs(schema, attrs)
    outs = (_lib.TensorDesc * protocol.MAX_TENSORS)()
    n_out = ctypes.c_uint32()
    errors.check(c._lib.opd_infer(h, name.encode(), descs if specs else None,
                                  len(specs), attr_arr, len(akey), outs,
                                  protocol.MAX_TENSORS, ctypes.byref(n_out)))
    r = tuple((getattr(torch, protocol.DTYPE_NAMES[o.dtype]),
               tuple(o.shape[:o.rank])) for o in outs[:n_out.value])
    if len(cache) > 4096:
        cache.clear()
    cache[key] = r
    return r


def host_view(t):
    """A zero-copy torch CPU tensor over contiguous host Tensor t (keeps t
    alive: torch holds the numpy array, whose base is t)."""
    if _np is None:
        return t.torch()
    if t.dtype == "bfloat16":    # no numpy bfloat16: its bits as float16
        return torch.from_numpy(_np.asarray(Tensor(
            t.arena, t.offset, "float16", t.shape, None, t))).view(torch.bfloat16)
    return torch.from_numpy(_np.asarray(t))


def in_arena(c, t):
    """(arena, offset) when torch CPU tensor t is contiguous and its bytes
    lie in one of c's host arenas (e.g. the output of an earlier
    torch.ops.opd call), else None."""
    alloc = c._alloc
    if alloc is None or not t.is_contiguous():
        return None
    p = t.data_ptr()
    n = t.numel() * t.element_size()
    for st in alloc._states:
        a = st.arena
        if a.base <= p and p + n <= a.base + a.size:
            return a, p - a.base
    return None


def in_device_view(c, t):
    """The opd Tensor behind torch CUDA tensor t when t is (part of) a
    zero-copy view of one of c's device arenas (the output of an earlier
    torch.ops.opd call on CUDA): that memory is the daemon's, not torch's,
    so it has no torch IPC handle; the run uses the arena in place. Else
    None (the run imports t's storage by IPC handle)."""
    maps = c._maps
    if not maps or not t.is_contiguous():
        return None
    p, n = t.data_ptr(), t.numel() * t.element_size()
    for m in list(maps.values()):
        if m.ptr <= p and p + n <= m.ptr + m.size:
            for v in list(m.views):
                return Tensor(v.tensor.arena, p - m.ptr, dtype_name(t.dtype),
                              tuple(t.shape), None, t)
    return None


_TCODES = {}                 # torch dtype -> OPD_DTYPE code


def torch_code(dt):
    code = _TCODES.get(dt)
    if code is None:
        code = _TCODES[dt] = _DT[dtype_name(dt)]
    return code


def cuda_desc(c, h, devb, t, keep):
    """The descriptor of contiguous torch CUDA tensor t in torch's own
    memory: libopd's opd_tensor_cuda (the allocation imported once per
    connection); one without a legacy IPC handle goes the from_torch way,
    which names the problem."""
    fn = c._tensor_cuda
    if fn is None:
        fn = c._tensor_cuda = getattr(c._lib, "opd_tensor_cuda", False)
    if fn:
        shape = t.shape
        if len(shape) > protocol.MAX_RANK:
            raise errors.error(protocol.ELIMIT, "rank %d out of 0..%d"
                               % (len(shape), protocol.MAX_RANK))
        d = _lib.TensorDesc()
        d.dtype, d.rank = torch_code(t.dtype), len(shape)
        d.shape[:len(shape)] = shape
        if t.numel() == 0 or fn(h, devb, t.data_ptr(), ctypes.byref(d)) == 0:
            keep.append(t)
            return d
    v = c._from_torch_cuda(t)
    keep.append(v)
    return c._runner.desc(v)


_SLOW = object()             # _call_cuda: take the general path


def _ptr_arrays(tmpl):
    """(opd_tensor_t[n] with dtype, rank and shape set, void *[n]) for
    opd_run_stream_ptrs."""
    tarr = (_lib.TensorDesc * max(1, len(tmpl)))()
    for d, (code, shape) in zip(tarr, tmpl):
        d.dtype, d.rank = code, len(shape)
        d.shape[:len(shape)] = shape
    return tarr, (ctypes.c_void_p * max(1, len(tmpl)))()


def _desc(aid, offset, code, shape):
    d = _lib.TensorDesc()
    d.arena, d.offset, d.dtype, d.rank = aid, offset, code, len(shape)
    d.shape[:len(shape)] = shape
    return d


class _Plan:
    """What every call of one signature shares (see DESIGN)."""
    __slots__ = ("specs", "cuda", "dev", "index", "devb", "attr_arr", "attr_keep",
                 "tmpl", "tarr", "parr", "like",
                 "n_attrs", "stage", "otmpl", "lock", "staged", "__weakref__")

    def __init__(self):
        self.lock = threading.Lock()
        self.staged = 0

    def __del__(self):
        if self.staged:
            with _staged_lock:
                _staged[0] -= self.staged


class OpRunner:
    """Runs torch.ops.opd.<name> (and its out= and in-place forms)."""

    def __init__(self, name, schema):
        self.name, self.ob, self.schema = name, name.encode(), schema
        self.variadic = _variadic(schema)
        self.in_names = [io["name"] for io in schema["inputs"]]
        self.attrs = [(a["name"], a["type"], a["default"], a["required"])
                      for a in schema["attrs"]]
        self.n_out = len(schema["outputs"])
        self.plans = collections.OrderedDict()   # signature -> _Plan (LRU)
        self.lock = threading.Lock()             # changes of plans
        self.infer_cache = {}

    def clear(self):
        self.plans.clear()
        self.infer_cache.clear()

    # ---- arguments -----------------------------------------------------------
    def split(self, args, kwargs):
        """(inputs, attrs, attribute key) of one call: inputs without the
        trailing Nones, attrs a dict, the key their values in order."""
        if self.variadic:
            ins = list(args[0]) if args else list(kwargs.get(self.in_names[0], ()))
            rest = args[1:]
        else:
            n = len(self.in_names)
            ins = list(args[:n])
            rest = args[n:]
            for nm in self.in_names[len(ins):]:
                ins.append(kwargs.get(nm))
        attrs, key = {}, []
        k = 0
        for name, typ, default, required in self.attrs:
            if k < len(rest):
                v = rest[k]
                k += 1
            elif name in kwargs:
                v = kwargs[name]
            elif not required:
                v = default
            else:
                continue
            if typ == "ints":
                v = [int(x) for x in v]
                key.append(tuple(v))
            else:
                if typ == "float":
                    v = float(v)
                key.append(v)
            attrs[name] = v
        while ins and ins[-1] is None:
            ins.pop()
        return ins, attrs, tuple(key)

    # ---- the plan of a signature ---------------------------------------------
    def _plan(self, c, sig, ins, attrs, cuda):
        p = _Plan()
        specs = infer(c, self.name, self.schema, ins, attrs, self.infer_cache)
        p.specs = []
        for tdt, shape in specs:
            dt = dtype_name(tdt)
            p.specs.append((dt, shape, tdt, _prod(shape) * protocol.DTYPE_SIZES[dt],
                            _DT[dt]))
        p.cuda = cuda is not None
        if p.cuda:
            idx = cuda.index if cuda.index is not None else torch.cuda.current_device()
            p.dev, p.index = "cuda:%d" % idx, idx
        else:
            p.dev, p.index = "cpu", None
        p.devb = p.dev.encode()
        if attrs:
            p.attr_arr, p.attr_keep, akey = c._runner.attrs(self.schema, attrs)
            p.n_attrs = len(akey)
        else:
            p.attr_arr, p.attr_keep, p.n_attrs = None, (), 0
        p.stage = [None] * len(ins)
        p.otmpl = [_desc(0, 0, code, shape) for _, shape, _, _, code in p.specs]
        if p.cuda:   # the fast path's descriptors: inputs, then outputs
            p.tmpl = [(torch_code(t.dtype), tuple(t.shape)) for t in ins] + \
                [(code, shape) for _, shape, _, _, code in p.specs]
            p.tarr, p.parr = _ptr_arrays(p.tmpl)
            # outputs shaped as the first input: torch.empty_like of it
            # (some 2 us less per output than torch.empty with a device)
            x0 = ins[0] if ins else None
            p.like = [x0 is not None and x0.is_cuda and tdt == x0.dtype and
                      tuple(shape) == tuple(x0.shape) for _, shape, tdt, _, _ in p.specs]
        with self.lock:
            plans = self.plans
            plans[sig] = p
            while len(plans) > PLANS:
                plans.popitem(last=False)
        return p

    def _staging(self, c, p, i, t, shared, keep):
        """The descriptor of a staging copy of CPU tensor t (input i)."""
        st = p.stage[i] if shared else None
        if st is None:
            o = c.empty(tuple(t.shape), dtype_name(t.dtype))
            st = (o, host_view(o), c._runner.desc(o))
            if shared:
                n = o.nbytes
                with _staged_lock:
                    ok = _staged[0] + n <= STAGE_BYTES
                    if ok:
                        _staged[0] += n
                if ok:
                    p.staged += n
                    p.stage[i] = st
        st[1].copy_(t)
        keep.append(st)
        return st[2]

    def _input(self, c, h, p, i, t, shared, keep):
        if t.is_cuda:
            if not t.is_contiguous():
                t = t.contiguous()
            v = in_device_view(c, t)
            if v is None:
                return cuda_desc(c, h, p.devb, t, keep)
            keep.append(v)
            return c._runner.desc(v)
        loc = in_arena(c, t)
        if loc is None:
            return self._staging(c, p, i, t, shared, keep)
        a, off = loc
        shape = tuple(t.shape)
        if len(shape) > protocol.MAX_RANK:
            raise errors.error(protocol.ELIMIT, "%s: rank %d out of 0..%d"
                               % (self.name, len(shape), protocol.MAX_RANK))
        return _desc(c._arena_id(a), off, _DT[dtype_name(t.dtype)], shape)

    # ---- a call --------------------------------------------------------------
    def call(self, c, args, kwargs, outs=None, label=None):
        """Runs the op on torch tensors; returns torch outputs (outs None)
        or writes them into the torch tensors outs and returns None (label:
        the form's name in error messages, e.g. "softmax_out")."""
        h = c._handle()
        ins, attrs, akey = self.split(args, kwargs)
        sig = [c._token, akey]
        cuda = None
        for i, t in enumerate(ins):
            if t is None:
                raise errors.error(protocol.EINVAL, "%s: input %d is None but "
                                   "a later input is given" % (self.name, i))
            if cuda is None and t.is_cuda:
                cuda = t.device
            sig.append((t.dtype, t.shape, t.device))
        sig = tuple(sig)
        p = self.plans.get(sig)
        if p is None:
            p = self._plan(c, sig, ins, attrs, cuda)
        else:
            try:
                self.plans.move_to_end(sig)
            except KeyError:       # evicted by another thread meanwhile
                pass
        shared = p.lock.acquire(False)
        try:
            if p.cuda:
                fast = c._run_ptrs
                if fast is None:
                    fast = c._run_ptrs = getattr(c._lib, "opd_run_stream_ptrs", False)
                if fast:
                    r = self._call_cuda(c, h, p, ins, outs, shared, label, fast)
                    if r is not _SLOW:
                        return r
            return self._call(c, h, p, ins, outs, shared, label)
        finally:
            if shared:
                p.lock.release()

    def _call_cuda(self, c, h, p, ins, outs, shared, label, fast):
        """A run on CUDA tensors in one libopd call (opd_run_stream_ptrs):
        torch's memory by pointer, new outputs allocated by torch itself
        (its caching allocator, on the current stream), the run ordered
        with torch's current stream. _SLOW for what it does not take (an
        empty tensor, an output in the daemon's memory)."""
        n_in = len(ins)
        tarr, parr = (p.tarr, p.parr) if shared else _ptr_arrays(p.tmpl)
        maps = c._maps
        x0 = None
        for i, t in enumerate(ins):
            if not t.is_contiguous():
                t = t.contiguous()
            if i == 0:
                x0 = t
            ptr = t.data_ptr()
            if not ptr:
                return _SLOW
            v = in_device_view(c, t) if maps else None
            if v is None:
                parr[i] = ptr
            else:                  # the daemon's own memory, in place
                d = c._runner.desc(v)
                parr[i] = None
                tarr[i].arena, tarr[i].offset = d.arena, d.offset
        copies = ()
        if outs is None:
            res = []
            like = p.like
            for k, (dt, shape, tdt, nbytes, code) in enumerate(p.specs):
                o = (torch.empty_like(x0) if like[k] else
                     torch.empty(shape, dtype=tdt, device=p.dev))
                ptr = o.data_ptr()
                if not ptr:
                    return _SLOW
                parr[n_in + k] = ptr
                res.append(o)
        else:
            _check_outs(p, outs, label or self.name)
            res, copies = None, []
            for k, (o, (dt, shape, tdt, nbytes, code)) in enumerate(zip(outs, p.specs)):
                if (maps and in_device_view(c, o) is not None) or not o.data_ptr():
                    return _SLOW
                if not o.is_contiguous():
                    tmp = torch.empty(shape, dtype=tdt, device=p.dev)
                    copies.append((o, tmp))
                    o = tmp
                parr[n_in + k] = o.data_ptr()
        rc = fast(h, p.devb, current_stream(p.index), self.ob, parr, tarr, n_in,
                  len(p.specs), p.attr_arr, p.n_attrs)
        if rc:
            errors.check(rc)
        for dst, src in copies:
            dst.copy_(src)
        return tuple(res) if res is not None else None

    def _call(self, c, h, p, ins, outs, shared, label):
        keep = []
        descs = [self._input(c, h, p, i, t, shared, keep)
                 for i, t in enumerate(ins)]
        n_in = len(descs)
        in_arr = None if not descs else descs[0] if n_in == 1 else \
            (_lib.TensorDesc * n_in)(*descs)
        if outs is None:
            res, odescs, copies = self._new_outputs(c, p, shared)
        else:
            res, odescs, copies = self._given_outputs(c, h, p, outs, keep,
                                                      label or self.name)
        n_out = len(odescs)
        out_arr = None if not odescs else odescs[0] if n_out == 1 else \
            (_lib.TensorDesc * n_out)(*odescs)
        if p.cuda:   # in order with torch's current stream, no CPU wait
            rc = c._run_ordered(h, p.devb, p.index, self.ob, in_arr, n_in,
                                out_arr, n_out, p.attr_arr, p.n_attrs)
        else:
            rc = c._lib.opd_run_on(h, p.devb, self.ob, in_arr, n_in, out_arr,
                                   n_out, p.attr_arr, p.n_attrs)
        if rc:
            errors.check(rc)
        if outs is not None:
            for dst, src in copies:
                dst.copy_(src)
            return None
        if p.cuda:
            return tuple(_device_view(o) for o in res)
        return tuple(host_view(o) for o in res)

    def _new_outputs(self, c, p, shared):
        alloc = c._alloc if not p.cuda else c._dalloc(p.dev)
        res, odescs = [], []
        for k, (dt, shape, _, nbytes, code) in enumerate(p.specs):
            b = alloc.alloc(nbytes)
            o = Tensor(b.state.arena, b.offset, dt, shape, None, b)
            aid = c._arena_id(o.arena)
            if shared:
                d = p.otmpl[k]
                d.arena, d.offset = aid, b.offset
            else:
                d = _desc(aid, b.offset, code, shape)
            res.append(o)
            odescs.append(d)
        return res, odescs, ()

    def _given_outputs(self, c, h, p, outs, keep, label):
        """Descriptors for out= tensors `outs`; a tensor the daemon cannot
        write in place gets a temporary, copied into it after the run."""
        _check_outs(p, outs, label)
        odescs, copies = [], []
        for k, (o, (dt, shape, tdt, nbytes, code)) in enumerate(zip(outs, p.specs)):
            if p.cuda:
                v = in_device_view(c, o) if o.is_contiguous() else None
                if v is None and o.is_contiguous():
                    odescs.append(cuda_desc(c, h, p.devb, o, keep))
                    continue
                if v is None:
                    v = c.empty(shape, dt, device=p.dev)
                    copies.append((o, _device_view(v)))
                keep.append(v)
                odescs.append(c._runner.desc(v))
                continue
            loc = in_arena(c, o)
            if loc is not None:
                odescs.append(_desc(c._arena_id(loc[0]), loc[1], code, shape))
                continue
            v = c.empty(shape, dt)
            keep.append(v)
            copies.append((o, host_view(v)))
            odescs.append(c._runner.desc(v))
        return outs, odescs, copies


def _check_outs(p, outs, label):
    """out= tensors `outs` have the op's output count, dtypes and shapes,
    on the run's device; else BadArgumentError naming the difference."""
    if len(outs) != len(p.specs):
        raise errors.error(protocol.EINVAL, "%s: %d outputs given, the op "
                           "has %d" % (label, len(outs), len(p.specs)))
    for k, (o, (dt, shape, tdt, nbytes, code)) in enumerate(zip(outs, p.specs)):
        if o.dtype != tdt or tuple(o.shape) != shape:
            raise errors.error(protocol.EINVAL, "%s: output %d has dtype %s "
                               "and shape %s; the op's output here is %s %s"
                               % (label, k, dtype_name(o.dtype),
                                  tuple(o.shape), dt, shape))
        if o.is_cuda != p.cuda or (p.cuda and o.device != torch.device(p.dev)):
            raise errors.error(protocol.EINVAL, "%s: output %d is on %s, the "
                               "run on %s" % (label, k, o.device, p.dev))


def _device_view(t):
    return t.torch()


def _prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n
