"""bench_strided: what a strided view costs an op against the same op on a
contiguous tensor of the same shape, through the daemon, in the same run.

DESIGN
The daemon gives a kernel that needs C-contiguous tensors a contiguous
copy of a strided input (and writes a strided output through one), inside
the same run (daemon/run/strided.h); this measures that copy's share of
the whole call. Each case times, one call at a time after a warm-up and in
alternating blocks (a shared machine's drift lands on both), the op on a
contiguous input into a contiguous output, then on a strided input (a
transpose, or every other column) or into a strided output (a slice of a
wider tensor), and prints the medians and their ratio strided /
contiguous, after checking the strided result against numpy:

    strided op=relu shape=1024x1024 layout=transpose contig_us=... strided_us=... ratio=...

Cases: relu, add (one strided operand), softmax and layernorm over the
last dim; shapes 64x1024 and 1024x1024. Layout transpose_all: every
tensor transposed alike (inputs and the output, as torch's
preserve_format and opd's Client lay out an elementwise op's result):
an elementwise op (OPD_OPF_ELEMENTWISE) then runs on flat memory with no
copy; a row-wise op still copies. $OPD_SOCKET or --socket names the
daemon; --reps sets the calls per block (default 30).
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import opd  # noqa: E402


def timed(f, reps):
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        out.append(time.perf_counter() - t0)
    return out


def ref(op, a, b, w):
    if op == "relu":
        return np.maximum(a, 0)
    if op == "add":
        return a + b
    if op == "softmax":
        e = np.exp(a - a.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    m = a.mean(-1, keepdims=True)
    return (a - m) / np.sqrt(((a - m) ** 2).mean(-1, keepdims=True) + 1e-5) * w


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket", default=os.environ.get("OPD_SOCKET"))
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    c = opd.connect(args.socket) if args.socket else opd.connect()
    rng = np.random.default_rng(0)
    bad = 0
    for rows, cols in ((64, 1024), (1024, 1024)):
        a = rng.standard_normal((rows, cols)).astype(np.float32)
        b = rng.standard_normal((rows, cols)).astype(np.float32)
        w = np.ones(cols, np.float32)
        xc, xb, xw = c.from_numpy(a), c.from_numpy(b), c.from_numpy(w)
        xt = c.from_numpy(np.ascontiguousarray(a.T)).T          # a, transposed storage
        xbt = c.from_numpy(np.ascontiguousarray(b.T)).T         # b, the same
        yt = c.empty((cols, rows)).T                            # an output laid out alike
        wide = c.from_numpy(np.repeat(a, 2, axis=1))            # a in every other column
        xs = wide[:, ::2]
        y = c.empty((rows, cols))
        yw = c.zeros((rows, 2 * cols))
        for op in ("relu", "add", "softmax", "layernorm"):
            extra = {"add": (xb,), "layernorm": (xw,)}.get(op, ())
            want = ref(op, a, b, w)
            cases = {"transpose": (xt, y), "step": (xs, y), "out_slice": (xc, yw[:, cols // 2:cols // 2 + cols]),
                     "transpose_all": (xt, yt)}
            for name, (x, out) in cases.items():
                ex = (xbt,) if name == "transpose_all" and op == "add" else extra
                run_c = lambda: c.run(op, xc, *extra, out=y)      # noqa: E731
                run_s = lambda: c.run(op, x, *ex, out=out)        # noqa: E731
                run_c(), run_s()
                got = out.numpy()
                ok = np.abs(got - want).max() <= 1e-4 + 1e-4 * np.abs(want).max()
                bad += not ok
                tc, ts = [], []
                for _ in range(3):
                    tc += timed(run_c, args.reps)
                    ts += timed(run_s, args.reps)
                mc, ms = statistics.median(tc) * 1e6, statistics.median(ts) * 1e6
                print("strided op=%s shape=%dx%d layout=%s contig_us=%.1f strided_us=%.1f "
                      "ratio=%.2f check=%s" % (op, rows, cols, name, mc, ms, ms / mc,
                                               "ok" if ok else "FAIL"), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
