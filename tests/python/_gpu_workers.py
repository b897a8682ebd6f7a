"""Functions the GPU tests run in child processes (importable by name, so
they work under spawn). No torch here: a worker needs no CUDA library to
use device tensors in the daemon."""
import os

import numpy as np

import opd


def attach_and_read(sock, name, q):
    """Attaches `name`, reads it (a host copy), multiplies it by 2 on its
    device into a tensor of its own, tries to write it; reports."""
    try:
        with opd.connect(sock) as c:
            w = c.attach(name)
            seen = w.numpy()
            doubled = c.mul(w, c.full(w.shape, 2.0, w.dtype, device=w.device))
            try:
                c.relu(doubled, out=w)
                ro = "writable!"
            except opd.BadArgumentError as e:
                ro = e.name
            q.put(("ok", w.device, w.shape, seen.tolist(),
                   doubled.numpy().tolist(), ro))
    except BaseException as e:  # report, never hang the parent
        q.put(("error", repr(e)))


def device_softmax(sock, seed, n, q):
    """n checked softmaxes of 256x1000 on device tensors of this worker."""
    try:
        with opd.connect(sock) as c:
            rng = np.random.default_rng(seed)
            a = rng.standard_normal((256, 1000)).astype(np.float32)
            x = c.from_numpy(a, device="cuda")
            y = c.empty(x.shape, "float32", device="cuda")
            e = np.exp(a - a.max(-1, keepdims=True))
            ref = e / e.sum(-1, keepdims=True)
            for _ in range(n):
                c.softmax(x, out=y)
            got = y.numpy()
            ok = bool(np.allclose(got, ref, atol=1e-6, rtol=1e-5))
            q.put(("ok" if ok else "wrong", os.getpid(), float(abs(got - ref).max())))
    except BaseException as e:
        q.put(("error", repr(e)))
