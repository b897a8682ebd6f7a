#!/usr/bin/env python3
"""probe_chain.py: the host cost of one tiny op on a CUDA tensor, through
each layer a torch.ops.opd call passes (a diagnostic for bench_chain.py's
target, not a benchmark).

DESIGN
Each entry runs --calls calls of one 1x1024 float32 op back to back on
torch's current stream, each on the previous one's output (a chain, as
bench_chain.py), with one torch.cuda.synchronize() at the end; the figure
is the wall time over the calls (us per call), median of --rounds:
  torch.relu               torch's own binding (unboxed, its kernel)
  torch.ops.aten.relu      the same op through torch.ops' Python packet:
                           what the torch.ops route itself costs
  aten.relu.default        the overload object (no overload resolution)
  opd.relu                 torch.ops.opd.relu: libopd's C kernel for
                           torch's dispatcher, enqueued (docs/async.md)
  opd.relu.default         the same through the overload object
  opd.mul                  a two-input op (torch.ops.opd.mul(y, w))
  torch.mul                torch's own
The opd entries minus aten's say what opd's C kernel and libopd add to
torch's dispatch; aten's minus torch's what torch.ops costs by itself.
With OPD_STREAM_TRACE=1 a `make BENCH=1` libopd also prints its steps per
call (every 2000 calls and at exit).

Usage: python3 docs/records/2026-12-01-stream-ordered-cost/probe_chain.py [--calls 2000] [--rounds 5] [--only opd.relu,...]
Needs torch >= 2.10 with CUDA and a daemon at $OPD_SOCKET (OPD_LIB as in
bench_models.py).
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "bench"))  # _torchbench, bench_models
import _torchbench as tb  # noqa: E402

PROG = "probe_chain"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default="",
                    help="comma list of entries to run (default: all)")
    args = ap.parse_args()
    for k in ("calls", "rounds"):
        if getattr(args, k) < 1:
            ap.error("--%s must be at least 1" % k)
    torch = tb.require_cuda_torch(PROG)
    tb.connect(PROG, None, ("relu", "mul"))
    dev = torch.device("cuda")
    x = torch.rand(1, 1024, device=dev) + 0.5
    w = torch.full((1024,), 1.0, device=dev)
    O, A = torch.ops.opd, torch.ops.aten
    entries = [
        ("torch.relu", lambda y: torch.relu(y)),
        ("torch.ops.aten.relu", lambda y: A.relu(y)),
        ("aten.relu.default", lambda y: A.relu.default(y)),
        ("opd.relu", lambda y: O.relu(y)),
        ("opd.relu.default", lambda y: O.relu.default(y)),
        ("torch.mul", lambda y: torch.mul(y, w)),
        ("opd.mul", lambda y: O.mul(y, w)),
    ]
    if args.only:
        want = args.only.split(",")
        unknown = [n for n in want if n not in dict(entries)]
        if unknown:
            ap.error("--only: unknown entr%s %s" % ("y" if len(unknown) == 1 else "ies",
                                                    ", ".join(unknown)))
        entries = [(n, f) for n, f in entries if n in want]
    for _, f in entries:  # warm: plans, the daemon's first answers
        y = x
        for _ in range(50):
            y = f(y)
    torch.cuda.synchronize()
    res = {name: [] for name, _ in entries}
    for _ in range(args.rounds):
        for name, f in entries:
            y = x
            t0 = time.perf_counter()
            for _ in range(args.calls):
                y = f(y)
            torch.cuda.synchronize()
            res[name].append((time.perf_counter() - t0) / args.calls * 1e6)
    for name, _ in entries:
        print(PROG + " entry=%s us_per_call=%.2f (rounds %s)"
              % (name, statistics.median(res[name]),
                 " ".join("%.2f" % v for v in res[name])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
