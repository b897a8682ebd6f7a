"""opd._torchcpu: libopd's C kernel for torch's CPU dispatch key, turned on
by opd.torch.cpu_kernels(), and the Python fallback it calls.

DESIGN
With it on, torch.ops.opd.* on CPU tensors runs libopd's C kernel
(client/torch/cpukern.c) with no Python in the call when every tensor of
the call lies in an arena the connection knows (opd.torch.empty and the
like, earlier outputs, registered share_memory_() storages: libopd learns
where each arena lies here from _arenas.py, opd_arena_note). Every other
call (a tensor that must be staged, a shm storage met for the first time,
a form the C kernel does not take) comes back whole to the Python kernel
(_torchops.OpRunner.call) through `fallback`: the C kernel hands over the
call's tensor handles (taken over here as torch tensors), its attribute
values (opd_attr_t), and takes the outputs' handles back. So does the
first call of each signature (dtypes, shapes, attributes), and `fallback`
then says whether torch's semantics change such calls (_torchsem.adjust:
type promotion, torch's argument forms): those stay with the Python
kernel (returns 2), the others run in C from the next one (returns 0).
A Python error there reaches torch as the C kernel's error:
RuntimeError("opd: <the message>"), as on CUDA; that is why the Python
kernel stays the default (off, its BadArgumentError and the other
OpdError classes reach the caller as they are).
"""
import ctypes

import torch

from . import _lib, _torchsem

_P = ctypes.POINTER
FALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                            _P(ctypes.c_void_p), ctypes.c_uint32,
                            _P(ctypes.c_void_p), ctypes.c_uint32,
                            _P(_lib.AttrDesc), ctypes.c_uint32,
                            _P(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_size_t)
FUNCTIONAL, INPLACE, OUT = 0, 1, 2

_py = ctypes.PyDLL(None)     # its own function objects: _dlpack.py sets
_capsule_new = _py.PyCapsule_New  # other argtypes on ctypes.pythonapi's
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_ptr = _py.PyCapsule_GetPointer
_capsule_ptr.restype = ctypes.c_void_p
_capsule_ptr.argtypes = [ctypes.py_object, ctypes.c_char_p]
# the plural form: it deletes the handles it takes (the singular one copies)
_steal = torch._C._aoti.alloc_tensors_by_stealing_from_void_ptrs
_handles = torch._C._aoti.unsafe_alloc_void_ptrs_from_tensors


def _tensors(hs, n):
    """The torch tensors of owned AtenTensorHandles hs[0..n) (taken over;
    NULL: None)."""
    got = [hs[i] for i in range(n)]
    ts = iter(_steal([_capsule_new(h, None, None) for h in got if h]))
    return [next(ts) if h else None for h in got]


def _value(a):
    t = a.type
    if t == 1:
        return int(a.i)
    if t == 2:
        return float(a.f)
    if t == 3:
        return bool(a.i)
    if t == 4:
        return a.s.decode() if a.s is not None else ""
    return [int(x) for x in a.ints[:a.n]]


def make_fallback(runners, bound):
    """The ctypes function the C kernel calls for a call it cannot serve:
    runs it with runners[op] (_torchops.OpRunner) on the connection
    bound()."""
    def fallback(op, form, ins, n_in, outs, n_out, attrs, n_attrs, ret, msg, cap):
        try:                    # every handle is ours first, whatever happens
            ts = _tensors(ins, n_in)
            given = _tensors(outs, n_out)
            name = op.decode()
            run = runners[name]
            kwargs = {attrs[a].name.decode(): _value(attrs[a]) for a in range(n_attrs)}
            args = (ts,) if run.variadic else tuple(ts)
            c = bound()
            keep = 0            # 2: calls like it stay here (torch's semantics)
            if run.sem:
                ins_, attrs_, _ = run.split(args, kwargs)
                keep = 2 if _torchsem.adjust(name, ins_, attrs_) is not None else 0
            if form == FUNCTIONAL:
                res = run.call(c, args, kwargs)
                for j, cap_ in enumerate(_handles(list(res))):
                    ret[j] = _capsule_ptr(cap_, None)
            elif form == OUT:
                run.call(c, args, kwargs, given, name + "_out")
            else:
                run.call(c, args, kwargs, [ts[0]], name + "_")
            return keep
        except BaseException as e:  # noqa: B902 -- torch raises it, C throws
            m = str(e).encode(errors="replace")[:max(0, cap - 1)]
            ctypes.memmove(msg, m + b"\0", len(m) + 1)
            return 1
    return FALLBACK(fallback)


def switch(lib, ns, on, runners, bound, state):
    """Turns the C kernel for torch's CPU key on or off (opd.torch.
    cpu_kernels): "" or why not; state keeps the ctypes functions alive."""
    fn = getattr(lib, "opd_torch_cpu_kernels", None) if lib is not None else None
    if fn is None:
        return "this libopd has no CPU torch kernel"
    cb = make_fallback(runners, bound) if on else None
    rc = fn(ns.encode(), 1 if on else 0, ctypes.cast(cb, ctypes.c_void_p) if cb else None)
    if rc:
        err = lib.opd_last_error()
        return err.decode(errors="replace") if err else str(rc)
    if cb is not None:          # kept for good: a call may still hold it
        state.setdefault("cpu_cbs", []).append(cb)
    return ""
