"""opd._torchops: the Python implementation behind torch.ops.opd.* (opd.torch):
CPU tensors.

DESIGN
On CUDA tensors torch.ops.opd.* runs libopd's C kernels (client/torch/,
registered by torch.py for torch's CUDA dispatch key): no Python in the
call. This file runs the calls on CPU tensors, with as little Python per
call as it can; torch.py registers the ops and their fake implementations
(torch.compile), this file runs them. A CUDA tensor that reaches it (a
torch older than the C kernels need, a libopd built without them, a form
torch refused) is refused with the reason torch.py gives (no_cuda).

A call is keyed by its signature: the connection, the attribute values and
each input's (dtype, shape, device). The first call of a signature builds a
_Plan, cached per runner (an LRU of PLANS): the outputs' dtypes and shapes
from the daemon's shape rule (one INFER, then never again for that
signature), the attributes as libopd takes them, output descriptor
templates and, for inputs that are not in shared memory, staging tensors
allocated once and reused by every later call (a copy into them is all a
call pays; the budget STAGE_BYTES bounds what all plans keep). A call then
uses an input whose bytes lie in shared memory the daemon maps in place (a
descriptor, no copy): one of the client's arenas (an earlier op's output,
opd.torch.empty) or a torch storage in a POSIX shm file (share_memory_(),
registered once per storage: _torch.py cpu_location); it copies any other
into the plan's staging tensor, counted as staging (STATS "staging",
Arenas.note_staging), carves the outputs from the client's host
Allocator (a new block of a reused arena), sends one opd_run_on and
returns the outputs as zero-copy torch views (numpy's array interface and
torch.from_numpy, a few microseconds where torch.from_dlpack through
ctypes costs several times that).
The call holding the plan also reuses what the last one found: an input
that is the very tensor of the last call (same object, same data pointer,
still contiguous) keeps its descriptor (the plan holds its arena), and the
last call's outputs are handed out again, as new torch tensors over the
same memory, when nothing uses them any more (no tensor, view or numpy
array over them: each output array's reference count is back to the
plan's own; their bytes count against STAGE_BYTES too). A call whose
inputs and outputs are both the last call's is the very same request: the
plan keeps it prepared (opd_prepare, once) and sends it with
opd_run_prepared (no descriptor packing per call); any other call drops it.
The plan's staging tensors and descriptor templates are used by one call at
a time (plan.lock, taken without blocking); a concurrent call of the same
signature builds its own.

out= and in-place forms (call(..., outs=...)): each given output must have
the dtype and shape of the op's output and be on the CPU; one the daemon
can write in place (contiguous and in shared memory it maps, as an input
above) is written there, any
other gets a temporary output that is copied into it after the run.
"""
import collections
import ctypes
import sys
import threading
import weakref

import torch

from . import _lib, _torchsem, errors, protocol
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


def _array(t):
    """A numpy array over contiguous host Tensor t (bfloat16: its bits as
    float16, numpy having no bfloat16)."""
    if t.dtype == "bfloat16":
        t = Tensor(t.arena, t.offset, "float16", t.shape, None, t)
    return _np.asarray(t)


def _torch_of(a, bf16):
    x = torch.from_numpy(a)
    return x.view(torch.bfloat16) if bf16 else x


def _unused(po):
    """True when no tensor or view uses the arrays of outputs po any more:
    each array's reference count is what the plan alone gives it (a torch
    tensor made from it holds it while any view of its storage lives)."""
    for a, _, _ in po:
        if sys.getrefcount(a) != _ALONE:
            return False
    return True


def _calibrate():
    po = [(_np.zeros(1) if _np is not None else None, None, False)]
    for a, _, _ in po:
        return sys.getrefcount(a)


_ALONE = _calibrate()


def _desc(aid, offset, code, shape):
    d = _lib.TensorDesc()
    d.arena, d.offset, d.dtype, d.rank = aid, offset, code, len(shape)
    d.shape[:len(shape)] = shape
    return d


class _Plan:
    """What every call of one signature shares (see DESIGN)."""
    __slots__ = ("specs", "devb", "attr_arr", "attr_keep", "n_attrs", "stage",
                 "otmpl", "lock", "staged", "ins", "outs", "kept", "prep",
                 "free", "moved", "__weakref__")

    def __init__(self):
        self.lock = threading.Lock()
        self.staged = 0
        self.outs = None        # [(array, opd Tensor, bf16)]: last outputs
        self.kept = 0           # the bytes of outs (in the budget too)
        self.prep = None        # the last call's request, prepared
        self.free = None        # opd_prepared_free
        self.moved = False      # this call's inputs are not the last one's

    def drop_prep(self):
        prep, self.prep = self.prep, None
        if prep is not None:
            self.free(prep)

    def __del__(self):
        self.drop_prep()
        if self.staged or self.kept:
            with _staged_lock:
                _staged[0] -= self.staged + self.kept


class OpRunner:
    """Runs torch.ops.opd.<name> (and its out= and in-place forms)."""

    def __init__(self, name, schema, no_cuda, runners=None):
        self.name, self.ob, self.schema = name, name.encode(), schema
        self.runners = runners       # {op: OpRunner}: adjusted calls' ops
        self.sem = runners is not None and name in _torchsem.RULES
        self.no_cuda = no_cuda       # f(torch name): the error for CUDA
        self.variadic = _variadic(schema)
        self.in_names = [io["name"] for io in schema["inputs"]]
        self.attrs = [(a["name"], a["type"], a["default"], a["required"])
                      for a in schema["attrs"]]
        self.n_out = len(schema["outputs"])
        self.defaults = None     # (attrs, key) of a call giving no attribute
        if not self.variadic and all(not a[3] for a in self.attrs):
            self.defaults = self._attrs((), {})
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
            if (not kwargs and len(args) == n and self.defaults is not None and
                    (n == 0 or args[-1] is not None)):
                return list(args), self.defaults[0], self.defaults[1]
            ins = list(args[:n])
            rest = args[n:]
            for nm in self.in_names[len(ins):]:
                ins.append(kwargs.get(nm))
        attrs, key = self._attrs(rest, kwargs)
        while ins and ins[-1] is None:
            ins.pop()
        return ins, attrs, key

    def _attrs(self, rest, kwargs):
        """(attrs dict, key tuple) of the attribute arguments."""
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
        return attrs, tuple(key)

    # ---- the plan of a signature ---------------------------------------------
    def _plan(self, c, sig, ins, attrs):
        p = _Plan()
        specs = infer(c, self.name, self.schema, ins, attrs, self.infer_cache)
        p.specs = []
        for tdt, shape in specs:
            dt = dtype_name(tdt)
            p.specs.append((dt, shape, tdt, _prod(shape) * protocol.DTYPE_SIZES[dt],
                            _DT[dt]))
        p.devb = b"cpu"
        if attrs:
            p.attr_arr, p.attr_keep, akey = c._runner.attrs(self.schema, attrs)
            p.n_attrs = len(akey)
        else:
            p.attr_arr, p.attr_keep, p.n_attrs = None, (), 0
        p.stage = [None] * len(ins)
        p.ins = [None] * len(ins)
        p.otmpl = [_desc(0, 0, code, shape) for _, shape, _, _, code in p.specs]
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
        c._arenas.note_staging(st[0].nbytes)
        keep.append(st)
        return st[2]

    def _input(self, c, p, i, t, shared, keep):
        if shared:              # the same tensor as the last call: its place
            hit = p.ins[i]
            if (hit is not None and hit[0]() is t and hit[1] == t.data_ptr() and
                    t.is_contiguous()):
                return hit[2]
            p.moved = True
        loc = c._torch.cpu_location(t)
        if loc is None:
            return self._staging(c, p, i, t, shared, keep)
        a, off = loc
        shape = tuple(t.shape)
        if len(shape) > protocol.MAX_RANK:
            raise errors.error(protocol.ELIMIT, "%s: rank %d out of 0..%d"
                               % (self.name, len(shape), protocol.MAX_RANK))
        d = _desc(c._arenas.arena_id(a), off, _DT[dtype_name(t.dtype)], shape)
        if shared:              # the arena held: the place stays its
            p.ins[i] = (weakref.ref(t), t.data_ptr(), d, a)
        return d

    # ---- a call --------------------------------------------------------------
    def call(self, c, args, kwargs, outs=None, label=None):
        """Runs the op on torch tensors; returns torch outputs (outs None)
        or writes them into the torch tensors outs and returns None (label:
        the form's name in error messages, e.g. "softmax_out")."""
        h = c._handle()
        ins, attrs, akey = self.split(args, kwargs)
        if self.sem:
            adj = _torchsem.adjust(self.name, ins, attrs)
            if adj is not None:
                return self._adjusted(c, adj, outs, label)
        sig = [c._token, akey]
        for i, t in enumerate(ins):
            if t is None:
                raise errors.error(protocol.EINVAL, "%s: input %d is None but "
                                   "a later input is given" % (self.name, i))
            if t.is_cpu:
                sig.append((t.dtype, t.shape))
                continue
            if t.is_cuda:
                raise self.no_cuda(label or self.name)
            sig.append((t.dtype, t.shape, t.device))
        sig = tuple(sig)
        p = self.plans.get(sig)
        if p is None:
            p = self._plan(c, sig, ins, attrs)
        else:
            try:
                self.plans.move_to_end(sig)
            except KeyError:       # evicted by another thread meanwhile
                pass
        shared = p.lock.acquire(False)
        try:
            return self._call(c, h, p, ins, outs, shared, label)
        finally:
            if shared:
                p.lock.release()

    def _adjusted(self, c, adj, outs, label):
        """The call as _torchsem.adjust made it: another op, inputs or
        attributes; with drop, the outputs without their last dim."""
        op, ins, attrs, drop = adj
        if drop and outs is not None:
            outs = [o.unsqueeze(-1) for o in outs]
        run = self.runners[op]
        args = (list(ins),) if run.variadic else tuple(ins)
        res = run.call(c, args, attrs, outs, label or self.name)
        if drop and res is not None:
            res = tuple(y.squeeze(-1) for y in res)
        return res

    def _call(self, c, h, p, ins, outs, shared, label):
        keep = []
        if shared:
            p.moved = False
        descs = [self._input(c, p, i, t, shared, keep)
                 for i, t in enumerate(ins)]
        same = False            # the very request of the last call
        if outs is None:
            res, odescs, again = self._outputs(c, p, shared)
            copies = ()
            same = again and shared and not p.moved
            if same and p.prep is not None:
                rc = c._lib.opd_run_prepared(h, p.prep)
                if rc:
                    p.drop_prep()
                    errors.check(rc)
                return res
        else:
            res, odescs, copies = self._given_outputs(c, p, outs, keep,
                                                      label or self.name)
        if shared:
            p.drop_prep()
        n_in = len(descs)
        in_arr = None if not descs else descs[0] if n_in == 1 else \
            (_lib.TensorDesc * n_in)(*descs)
        n_out = len(odescs)
        out_arr = None if not odescs else odescs[0] if n_out == 1 else \
            (_lib.TensorDesc * n_out)(*odescs)
        rc = c._lib.opd_run_on(h, p.devb, self.ob, in_arr, n_in, out_arr,
                               n_out, p.attr_arr, p.n_attrs)
        if rc:
            errors.check(rc)
        if same:                # a loop on the same tensors: encode it once
            prep = ctypes.c_void_p()
            if c._lib.opd_prepare(h, p.devb, self.ob, in_arr, n_in, out_arr,
                                  n_out, p.attr_arr, p.n_attrs,
                                  ctypes.byref(prep)) == 0:
                p.free = c._lib.opd_prepared_free
                p.prep = prep
        if outs is not None:
            for dst, src in copies:
                dst.copy_(src)
            return None
        return res

    def _outputs(self, c, p, shared):
        """(torch outputs, descriptors, again) of a call that makes its
        outputs: the last call's memory again (again: True) when nothing of its outputs is alive
        any more (no tensor, view or array over them: each output array's
        reference count is back to the plan's own), else new blocks, kept
        for the next call while the STAGE_BYTES budget allows."""
        po = p.outs
        if po is not None and shared:
            if _unused(po):
                return tuple([_torch_of(a, bf) for a, _, bf in po]), p.otmpl, True
            self._drop_outputs(p)
        res, odescs, _ = self._new_outputs(c, p, shared)
        if not shared or _np is None:
            return tuple(host_view(o) for o in res), odescs, False
        po = [(_array(o), o, o.dtype == "bfloat16") for o in res]
        n = sum(o.nbytes for o in res)
        with _staged_lock:
            ok = _staged[0] + n <= STAGE_BYTES
            if ok:
                _staged[0] += n
        if ok:
            p.kept = n
            p.outs = po
        return tuple([_torch_of(a, bf) for a, _, bf in po]), odescs, False

    @staticmethod
    def _drop_outputs(p):
        n, p.outs, p.kept = p.kept, None, 0
        if n:
            with _staged_lock:
                _staged[0] -= n

    def _new_outputs(self, c, p, shared):
        alloc = c._arenas.alloc
        res, odescs = [], []
        for k, (dt, shape, _, nbytes, code) in enumerate(p.specs):
            b = alloc.alloc(nbytes)
            o = Tensor(b.state.arena, b.offset, dt, shape, None, b)
            aid = c._arenas.arena_id(o.arena)
            if shared:
                d = p.otmpl[k]
                d.arena, d.offset = aid, b.offset
            else:
                d = _desc(aid, b.offset, code, shape)
            res.append(o)
            odescs.append(d)
        return res, odescs, ()

    def _given_outputs(self, c, p, outs, keep, label):
        """Descriptors for out= tensors `outs`; a tensor the daemon cannot
        write in place gets a temporary, copied into it after the run."""
        _check_outs(p, outs, label)
        odescs, copies = [], []
        for k, (o, (dt, shape, tdt, nbytes, code)) in enumerate(zip(outs, p.specs)):
            loc = c._torch.cpu_location(o)
            if loc is not None:
                odescs.append(_desc(c._arenas.arena_id(loc[0]), loc[1], code, shape))
                continue
            v = c.empty(shape, dt)
            keep.append(v)
            copies.append((o, host_view(v)))
            c._arenas.note_staging(nbytes)
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
        if o.is_cuda:
            raise errors.error(protocol.EINVAL, "%s: output %d is on %s, the "
                               "run on cpu" % (label, k, o.device))


def _prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n
