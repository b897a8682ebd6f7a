"""bench_cpu_torch: opd's CPU backend against torch's own CPU operators in
this process, per call, in the same run: what a program gives up or gains
by sending a CPU op to the daemon instead of running it in-process.

DESIGN
opd's side is its best case on the CPU: the Client on opd Tensors that
already live in shared memory, writing into a given output
(`c.relu(x, out=y)`), so no copy in or out; the figure is the whole call
(the request, the daemon's kernel on its thread pool or, for a run of at
most --inline-bytes, on its event loop, the reply). torch's side is the
same op on torch tensors over the same values, in this process, with
torch's own threads (--threads, default: every CPU, as the daemon's pool),
writing into a given tensor where torch has an out= form (relu as
clamp_min, add, gelu, softmax, matmul); layernorm and conv2d allocate their
result, as torch's callers do (a fresh large output may cost torch page
faults when glibc has handed the last one back to the kernel).
Each case times each side one call at a time after a warm-up, in
alternating blocks (a shared machine's drift lands on both), and prints
the medians and their ratio opd / torch (below 1: opd is faster), after
checking that both give the same result (max |opd - torch| within
1e-4 + 1e-4 max|torch|; 1e-3 for matmul and conv2d, whose sums run in
other orders). A mismatch fails the run (exit 1).

    cpu op=relu shape=256x1024 opd_us=... torch_us=... ratio=... max_abs=... check=ok

Cases (--sizes picks among small, medium, large): relu, add, gelu (erf and
tanh forms), softmax and layernorm over the last dim, on 8x1024 (small),
256x1024 (medium) and 2048x2048 (large); matmul on 64, 256 and 1024
squares, also timed through numpy (np.matmul with out=, OpenBLAS on
Debian: issue 41's bar for matmul; numpy_us=, ratio_numpy= opd / numpy); conv2d 3x3 (padding 1) on 1x16x32x32 -> 16, 1x64x56x56 -> 64 and
8x64x28x28 -> 128. Needs numpy and torch; $OPD_SOCKET or --socket names the
daemon.

Usage: python3 bench/bench_cpu_torch.py [--socket PATH] [--reps N]
       [--sizes small,medium,large] [--threads N] [--ops relu,add,...]
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import opd

BLOCKS = 5
SIZES = ("small", "medium", "large")
ROWS = {"small": (8, 1024), "medium": (256, 1024), "large": (2048, 2048)}
MATMUL = {"small": 64, "medium": 256, "large": 1024}
CONV = {"small": (1, 16, 32, 16), "medium": (1, 64, 56, 64), "large": (8, 64, 28, 128)}
OPS = ("relu", "add", "gelu", "gelu_tanh", "softmax", "layernorm", "matmul", "conv2d")


def timed(fn, reps):
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def compare(fs, reps):
    """Medians (us) of each callable of fs (opd, torch[, numpy]),
    alternating in blocks."""
    for f in fs:
        f()
    ts = [[] for _ in fs]
    per = max(1, reps // BLOCKS)
    for _ in range(BLOCKS):
        for f, t in zip(fs, ts):
            t += timed(f, per)
    return [statistics.median(t) * 1e6 for t in ts]


def cases(c, size, ops, rng):
    """(op, shape text, opd callable, torch callable, opd output (an opd
    Tensor), torch's output (a callable giving it), tolerance) per case of
    this size. torch's side is each op's usual form: out= where torch has
    one, else the call that allocates its result (kept, for the check)."""
    out = []
    kept = []

    def keep(t):
        kept[:] = [t]
        return t

    rows = ROWS[size]
    a = rng.standard_normal(rows, dtype=np.float32)
    b = rng.standard_normal(rows, dtype=np.float32)
    x, xb, y = c.from_numpy(a), c.from_numpy(b), c.empty(rows, "float32")
    ta, tb, ty = torch.from_numpy(a.copy()), torch.from_numpy(b.copy()), torch.empty(rows)
    shape = "x".join(map(str, rows))
    w = rng.standard_normal(rows[-1], dtype=np.float32)
    bias = rng.standard_normal(rows[-1], dtype=np.float32)
    xw, xbias = c.from_numpy(w), c.from_numpy(bias)
    tw, tbias = torch.from_numpy(w.copy()), torch.from_numpy(bias.copy())
    last = lambda: kept[0]   # noqa: E731  (the result torch allocated)
    given = lambda: ty       # noqa: E731  (torch wrote into ty)
    elementwise = {
        "relu": (lambda: c.relu(x, out=y), lambda: torch.clamp_min(ta, 0, out=ty), given),
        "add": (lambda: c.add(x, xb, out=y), lambda: torch.add(ta, tb, out=ty), given),
        # F.gelu's own kernel with out= (torch._C._nn.gelu, what F.gelu calls)
        "gelu": (lambda: c.gelu(x, out=y), lambda: torch._C._nn.gelu(ta, out=ty), given),
        "gelu_tanh": (lambda: c.gelu(x, approximate="tanh", out=y),
                      lambda: torch._C._nn.gelu(ta, approximate="tanh", out=ty), given),
        "softmax": (lambda: c.softmax(x, out=y), lambda: torch.softmax(ta, -1, out=ty), given),
        "layernorm": (lambda: c.layernorm(x, xw, xbias, eps=1e-5, out=y),
                      lambda: keep(F.layer_norm(ta, (rows[-1],), tw, tbias, 1e-5)), last),
    }
    for op in ops:
        if op in elementwise:
            fo, ft, want = elementwise[op]
            out.append((op, shape, fo, ft, y, want, 1e-4))
    if "matmul" in ops:
        m = MATMUL[size]
        p = rng.standard_normal((m, m), dtype=np.float32)
        q = rng.standard_normal((m, m), dtype=np.float32)
        xp, xq, ym = c.from_numpy(p), c.from_numpy(q), c.empty((m, m), "float32")
        tp, tq, tm = torch.from_numpy(p.copy()), torch.from_numpy(q.copy()), torch.empty(m, m)
        np_out = np.empty((m, m), np.float32)
        out.append(("matmul", "%dx%d" % (m, m), lambda: c.matmul(xp, xq, out=ym),
                    lambda: torch.matmul(tp, tq, out=tm), ym, lambda: tm, 1e-3,
                    lambda: np.matmul(p, q, out=np_out)))
    if "conv2d" in ops:
        n, ci, h, k = CONV[size]
        u = rng.standard_normal((n, ci, h, h), dtype=np.float32)
        v = rng.standard_normal((k, ci, 3, 3), dtype=np.float32) * 0.1
        xu, xv, yc = c.from_numpy(u), c.from_numpy(v), c.empty((n, k, h, h), "float32")
        tu, tv = torch.from_numpy(u.copy()), torch.from_numpy(v.copy())
        out.append(("conv2d", "%dx%dx%dx%d,k%d" % (n, ci, h, h, k),
                    lambda: c.conv2d(xu, xv, padding=1, out=yc),
                    lambda: keep(F.conv2d(tu, tv, padding=1)), yc, lambda: kept[0], 1e-3))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", default=None)
    ap.add_argument("--reps", type=int, default=50, help="calls per side and case")
    ap.add_argument("--sizes", default=",".join(SIZES))
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="torch's threads (default: every CPU)")
    args = ap.parse_args()
    sizes = [s for s in args.sizes.split(",") if s]
    ops = [o for o in args.ops.split(",") if o]
    bad = [s for s in sizes if s not in SIZES] + [o for o in ops if o not in OPS]
    if bad:
        ap.error("unknown %s; sizes: %s; ops: %s" % (",".join(bad), ",".join(SIZES),
                                                      ",".join(OPS)))
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    torch.set_num_threads(max(1, args.threads))
    rng = np.random.default_rng(0)
    failed = 0
    with opd.connect(args.socket) as c:
        print("# bench_cpu_torch: opd %s (transport %s), torch %s with %d threads, %d CPUs"
              % (opd.__version__, c.transport,
                 torch.__version__, torch.get_num_threads(), os.cpu_count()))
        for size in sizes:
            for op, shape, fo, ft, yo, yt, tol, *fn in cases(c, size, ops, rng):
                mo, mt, *mn = compare([fo, ft] + fn, args.reps)
                kept_want = yt()
                got, want = yo.numpy(), kept_want.numpy()
                err = float(np.max(np.abs(got - want))) if want.size else 0.0
                ok = err <= tol + tol * float(np.max(np.abs(want)))
                failed += not ok
                extra = "".join(" numpy_us=%.1f ratio_numpy=%.2f" % (n, mo / n) for n in mn)
                print("cpu op=%s shape=%s opd_us=%.1f torch_us=%.1f ratio=%.2f max_abs=%.2e "
                      "check=%s%s" % (op, shape, mo, mt, mo / mt, err, "ok" if ok else "FAILED",
                                      extra))
                sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
