"""opd._graphrun: the running half of opd._graph's Graph (a mixin).

DESIGN
Runs holds what a defined Graph does per call; its state (the staging
tensors, the outputs it allocated, the memo of prepared runs, the
prepares count) is the Graph's, made in Graph.__init__, changed here
and reset by its define and close. run() takes opd Tensors as they are and copies numpy arrays and
torch CPU tensors into one staging Tensor per input (made once), writes
into the outputs given (out=) or the Graph's own (allocated once per
device), and sends the run encoded once per set of tensors
(opd_graph_prepare, then opd_run_prepared per call), memoized on the
tensors' identity (held weakly) as the Runner's run memo does for ops
(_runner.py); a call with the very opd Tensors of the last one, on the
same connection with nothing to release or order with torch, goes
straight to the prepared run (`_fast` keeps that call's tensors until
another call or close()). A run that touches torch's CUDA memory (torch
CUDA tensors, live torch views) waits for torch's queued work first and
is sent plainly (opd_graph_run, answered when done). submit() stages
into new tensors and writes new outputs (out=None), so runs in flight
share none.
"""
import ctypes
import weakref

from . import _lib, errors, memory, protocol
from ._prepared import Request
from ._runner import OPD_RUN_ASYNC, _Encoded
from ._torch import _is_torch, sync_device
from .errors import check
from .tensor import Tensor, dtype_name

_MEMO_MAX = 16          # prepared runs kept per Graph (other tensor sets)


class _Prep:
    """A graph run libopd encoded once (enc: an _Encoded) for these input
    and output tensors (held weakly), asynchronous when on device memory."""
    __slots__ = ("enc", "refs", "on_dev")

    def __init__(self, enc, tensors, on_dev):
        self.enc, self.on_dev = enc, on_dev
        self.refs = tuple([weakref.ref(t) for t in tensors])

    def holds(self, tensors):
        for r, t in zip(self.refs, tensors):
            if r() is not t:
                return False
        return True


class Runs:
    """run() and submit() of a defined Graph (see opd._graph.Graph)."""

    # ---- running ---------------------------------------------------------------
    def _ready(self):
        """The connection's handle, the graph defined on it."""
        if self._state != "defined":
            raise errors.error(protocol.ESTATE, "%s is %s: %s" % (
                self._label(), self._state, "define it first (define(), or "
                "leave its with block)" if self._state == "building" else
                "make a new one"))
        c = self._c
        h = c._handle()
        if c._token is not self._token:   # fork or reconnect: a new session
            if self.device != "cpu":      # device constants were the old one's
                self._arena = None
                self._pack_consts()
            self._define(h)
        return h

    def _inputs_of(self, inputs, fresh):
        """opd Tensors for the run's inputs, and the torch device to
        synchronize first (or None). Arrays and torch CPU tensors are
        copied into staging tensors (new ones when fresh)."""
        if len(inputs) != len(self._inputs):
            raise errors.error(protocol.EARITY, "%s takes %d inputs, "
                               "%d given" % (self._label(), len(self._inputs),
                                             len(inputs)))
        ins, torch_dev = list(inputs), None
        for i, x in enumerate(ins):
            if isinstance(x, Tensor):
                continue
            if _is_torch(x) and x.is_cuda:
                torch_dev = x.device
                ins[i] = self._c._torch.from_torch_cuda(x)
                continue
            ins[i] = self._stage(i, x, fresh)
        return ins, torch_dev

    def _stage(self, i, x, fresh):
        v = self._inputs[i]
        st = None if fresh else self._staging.get(i)
        if st is None:
            st = self._c.empty(v.shape, v.dtype)
            if not fresh:
                self._staging[i] = st
        if _is_torch(x):
            x = x.detach()
            shape, dt = tuple(x.shape), dtype_name(x.dtype)
        else:
            import numpy as np
            x = np.asarray(x)
            shape, dt = x.shape, dtype_name(x.dtype)
        if shape != v.shape or dt != v.dtype:
            raise errors.error(protocol.ESHAPE if dt == v.dtype else
                               protocol.EDTYPE, "%s: input %d (%s) is %s "
                               "%s, the graph takes %s %s" % (
                                   self._label(), i, v.name, dt, shape,
                                   v.dtype, v.shape))
        if st.size:
            if _is_torch(x):
                st.torch().copy_(x)
            else:
                import numpy as np
                np.copyto(np.asarray(st), x, casting="no")
        return st

    def _outputs_of(self, out, ins, fresh=False):
        """(the output Tensors, what run() returns, a torch device); out=None:
        the Graph's own (new ones when fresh), on the inputs' device."""
        torch_dev = None
        if out is None:
            dev = "cpu"
            for t in ins:
                if t.arena.device != "cpu":
                    dev = t.arena.device
                    break
            outs = None if fresh else self._own_outs.get(dev)
            if outs is None:
                outs = tuple(self._c.empty(o.shape, o.dtype, dev)
                             for o in self.outputs)
                if not fresh:
                    self._own_outs[dev] = outs
            ret = outs
        else:
            ret = (out,) if isinstance(out, Tensor) or _is_torch(out) else tuple(out)
            outs = list(ret)
            for k, o in enumerate(outs):
                if isinstance(o, Tensor):
                    continue
                if _is_torch(o) and o.is_cuda:
                    torch_dev = o.device
                    outs[k] = self._c._torch.from_torch_cuda(o)
                    continue
                raise errors.error(protocol.EINVAL, "%s: output %d must "
                                   "be an opd Tensor or a torch CUDA tensor, "
                                   "not %s" % (self._label(), k,
                                               type(o).__name__))
            outs = tuple(outs)
        if len(outs) != len(self.outputs):
            raise errors.error(protocol.EARITY, "%s writes %d outputs, "
                               "%d given" % (self._label(), len(self.outputs),
                                             len(outs)))
        if len(ret) == 1:
            ret = ret[0]
        return outs, ret, torch_dev

    def _viewed(self, ins, outs):
        """The device of a tensor with live torch views, else None."""
        ti = self._c._torch
        if ti.maps:
            for t in ins + list(outs):
                if ti.viewed(t):
                    return t.arena.device
        return None

    def _descs(self, ts):
        if not ts:
            return None
        desc = self._c._runner.desc
        return (_lib.TensorDesc * len(ts))(*[desc(t) for t in ts])

    def run(self, *inputs, out=None, wait=False):
        """Runs the graph on `inputs` (opd Tensors used in place; numpy
        arrays and torch CPU tensors copied into staging tensors reused
        across calls; torch CUDA tensors in place) and returns the outputs
        (one, or a tuple). out: the Tensors to write (one or a tuple: the
        hot path: with the same tensors each call, a run is one prepared
        request and copies nothing); None writes into outputs the Graph
        allocates once and returns each time, so copy what you keep
        (threads sharing a Graph pass their own tensors: the staging
        tensors and own outputs are one set per Graph). Raises the
        daemon's OpdError.
        wait: on device memory a run is stream-ordered and returns once
        enqueued (synchronize() waits, docs/async.md); wait=True makes it
        answered when its work is done, in the same one round trip (a
        server reading its output next)."""
        f, c = self._fast, self._c
        # the fast path: the last call's opd Tensors again, on the same
        # connection, nothing to release or order with torch since
        if (f is not None and out is f[1] and c._h is f[2] and wait is f[5] and
                len(inputs) == len(f[0]) and not c._pending_release and
                c._gen == memory._fork_gen[0] and not c._torch.maps):
            for a, b in zip(inputs, f[0]):
                if a is not b:
                    break
            else:
                m = f[3]
                if m.on_dev:
                    c._runner.unsynced = True
                rc = m.enc.run(f[2], m.enc.p)
                if rc:
                    check(rc)
                return f[4]
        h = self._ready()
        ins, tdev = self._inputs_of(inputs, False)
        outs, ret, odev = self._outputs_of(out, ins)
        tdev = tdev or odev or self._viewed(ins, outs)
        if tdev is not None:       # torch's memory: its work done first
            sync_device(tdev)
            check(c._need("opd_graph_run")(h, self.id, self._descs(ins),
                                           len(ins), self._descs(outs),
                                           len(outs)))
            return ret
        wait = bool(wait)
        key = tuple(map(id, ins)) + (wait,) + tuple(map(id, outs))
        tensors = ins + list(outs)
        m = self._memo.get(key)
        if m is None or not m.holds(tensors):
            m = self._prepare(h, ins, outs, key, wait)
        if m.on_dev:
            c._runner.unsynced = True
        rc = m.enc.run(h, m.enc.p)
        if rc:
            check(rc)
        for x in inputs:
            if type(x) is not Tensor:     # an array: staged on every call
                self._fast = None
                return ret
        self._fast = (inputs, out, h, m, ret, wait)
        return ret

    def _prepare(self, h, ins, outs, key, wait):
        c = self._c
        on_dev = not wait and (any(t.arena.device != "cpu" for t in ins) or
                               any(t.arena.device != "cpu" for t in outs))
        p = ctypes.c_void_p()
        check(c._need("opd_graph_prepare")(
            h, self.id, self._descs(ins), len(ins), self._descs(outs),
            len(outs), OPD_RUN_ASYNC if on_dev else 0, ctypes.byref(p)))
        self.prepares += 1
        m = _Prep(_Encoded(p, c._need("opd_prepared_free"),
                           c._need("opd_run_prepared")), ins + list(outs), on_dev)
        if len(self._memo) >= _MEMO_MAX:
            self._memo.clear()
        self._memo[key] = m
        return m

    def submit(self, *inputs, out=None):
        """Sends a run without waiting (arguments as run(); arrays are
        staged into new tensors and out=None makes new outputs, so runs in
        flight share none); returns a Request whose wait() returns the
        outputs."""
        h = self._ready()
        ins, tdev = self._inputs_of(inputs, True)
        outs, ret, odev = self._outputs_of(out, ins, True)
        tdev = tdev or odev or self._viewed(ins, outs)
        if tdev is not None:
            sync_device(tdev)
        rid = ctypes.c_uint64()
        keep = (ins, outs)
        check(self._c._need("opd_graph_submit")(
            h, self.id, self._descs(ins), len(ins), self._descs(outs), len(outs),
            0, ctypes.byref(rid)))
        return Request(self._c, rid.value, keep, ret, self._c._token)
