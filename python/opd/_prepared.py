"""opd._prepared: Request (a submitted run) and Prepared (a run encoded once).

DESIGN
Both belong to one Client and reach it through an explicit reference:
a Request waits on the connection it was submitted on (opd_wait) and
keeps the run's tensors alive until then; a Prepared asks the client's
Runner part for its Run once (prepare), has libopd encode it
(opd_prepare_flags) and sends it per call with one ctypes call
(opd_run_prepared, or opd_run_prepared_stream in torch's stream order),
rebuilding itself when the connection changed (fork, reconnect).
"""
import ctypes

from . import errors, memory, protocol
from ._runner import OPD_RUN_ASYNC, OPD_RUN_STREAM, cuda_index, prepare_flags
from ._torch import current_stream, sync_device
from .errors import check


class Request:
    """A submitted run (Client.submit). wait() returns its outputs."""
    __slots__ = ("_client", "_id", "_keep", "_result", "_done", "_token",
                 "_settle")

    def __init__(self, client, rid, keep, result, token, settle=False):
        self._client, self._id, self._keep = client, rid, keep
        self._result, self._done, self._token = result, False, token
        self._settle = settle

    def wait(self, timeout=None):
        """Waits for the run; returns what run() would (the outputs).
        timeout in seconds (None: forever). Raises OpdTimeoutError if it
        is still running (wait again later), or the run's OpdError."""
        if self._done:
            return self._result
        c = self._client
        h = c._handle()
        if c._token is not self._token:
            raise errors.error(protocol.ESTATE, "this request was submitted "
                               "on a connection that is gone (fork or close)")
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        rc = c._lib.opd_wait(h, self._id, ms)
        if rc == protocol.ETIMEDOUT:
            check(rc)
        self._done, self._keep = True, None
        check(rc)
        if self._settle:        # answered at enqueue: torch reads it next
            c.synchronize()
        return self._result


class Prepared:
    """A run prepared once by Client.prepare(). Call it to run it (returns
    the outputs, as run() would: the same Tensors every time); submit()
    sends it without waiting. It is rebuilt by itself after the
    connection changes (fork). close() frees it (also on garbage
    collection). It is sent as run() would send it: in torch's stream
    order when it touches torch's memory, asynchronously on device
    memory."""
    __slots__ = ("_client", "_op", "_inputs", "_out", "_device", "_attrs",
                 "_p", "_token", "_keep", "_result", "_torch_dev", "_free",
                 "_run", "_h", "_stream", "_async")

    def __init__(self, client, op, inputs, out, device, attrs):
        self._client, self._op, self._inputs = client, op, tuple(inputs)
        self._out, self._device, self._attrs = out, device, dict(attrs)
        self._p, self._token, self._h = None, None, None
        self._free = client._need("opd_prepared_free")
        self._run = client._need("opd_run_prepared")
        self._build()

    def _build(self):
        c = self._client
        r, ret, devb = c._runner.prepare(self._op, self._inputs, self._out,
                                         self._attrs, self._device)
        if self._out is None:             # the outputs allocated once
            self._out = ret
        self._torch_dev, on_dev = r.torch_dev, r.on_dev
        self._stream = self._async = None
        flags = 0
        if self._torch_dev is not None and \
                getattr(c._lib, "opd_run_prepared_stream", None) is not None:
            self._stream = cuda_index(self._torch_dev)   # in torch's order
            devb, flags = ("cuda:%d" % self._stream).encode(), OPD_RUN_STREAM
        elif on_dev and self._torch_dev is None:
            flags = OPD_RUN_ASYNC
        p = ctypes.c_void_p()
        check(prepare_flags(c, r.h, devb, r.c_args(), flags, p))
        if flags == OPD_RUN_ASYNC and getattr(c._lib, "opd_prepare_flags", None):
            self._async = True
        self.close()
        self._p, self._token, self._keep = p, c._token, r
        self._result = ret[0] if len(ret) == 1 else (ret if ret else None)

    def _ready(self):
        c = self._client
        h = c._handle()
        if c._token is not self._token:   # a new connection: its arena ids
            self._build()
            h = c._handle()
        fallback = self._torch_dev is not None and self._stream is None
        if fallback and c.sync_torch:
            sync_device(self._torch_dev)
        # the fast path of __call__: this handle, while the connection, the
        # fork generation and the client's release queue stay as they are
        self._h = None if fallback else h
        return h

    def __call__(self):
        c = self._client
        h = self._h
        # the fast path (a loop of tiny ops): nothing to rebuild, release
        # or synchronize since the last call; else _ready() does it all
        if (h is None or h is not c._h or c._gen != memory._fork_gen[0] or
                c._pending_release):
            h = self._ready()
        if self._stream is not None:
            rc = c._lib.opd_run_prepared_stream(h, self._p,
                                                current_stream(self._stream))
        else:
            if self._async:
                c._runner.unsynced = True
            rc = self._run(h, self._p)
        if rc:
            check(rc)
        return self._result

    def submit(self):
        """Sends the run without waiting; returns a Request (wait() returns
        the outputs: a run on device memory is then enqueued, one on
        torch's memory complete)."""
        h = self._ready()
        c = self._client
        if self._stream is not None and c.sync_torch:
            sync_device(self._torch_dev)  # what torch queued, done first
        if self._async:
            c._runner.unsynced = True
        rid = ctypes.c_uint64()
        check(c._lib.opd_submit_prepared(h, self._p, ctypes.byref(rid)))
        return Request(c, rid.value, self._keep, self._result, self._token,
                       settle=self._stream is not None)

    def close(self):
        """Frees the encoded request (the tensors stay as they are)."""
        p, self._p = self._p, None
        if p is not None and p.value:
            self._free(p)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
