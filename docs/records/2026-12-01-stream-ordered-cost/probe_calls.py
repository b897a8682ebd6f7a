#!/usr/bin/env python3
"""probe_calls.py: where the time of torch.ops.opd calls goes inside the
real models of bench_models.py (a diagnostic, not a benchmark).

DESIGN
bench_models' forwards through opd are bound by the host, and a call costs
more there than in a loop of the same op. This builds the same models
(bench_models.BUILD) and times, per forward, on the host:
  call    each torch.ops.opd.<op>(...) as the wrappers make it (torch's
          dispatch, opd.torch's Python, libopd), by a stand-in for
          bench_models.OPS;
  runner  opd.torch's OpRunner.call (the Python below the dispatch);
  libopd  the one C call (opd_run_stream_ptrs);
  rest    the forward minus the calls (torch's own work);
then the same op with the same arguments 200 times in a loop after one
forward (the in-loop cost). torch's own forward's host time is measured
alongside, so "rest" can be set against it minus what torch spends on the
ops opd took over (torch's <op> timed the same ways, in the model).

It probes opd.torch's Python path: OPD_TORCH_C=0 unless the environment
says otherwise (libopd's C kernels, the default on torch >= 2.10, have no
Python runner to time; with OPD_TORCH_C=1 only `call` and `rest` mean
anything).

Usage: python3 docs/records/2026-12-01-stream-ordered-cost/probe_calls.py [--models gpt2,resnet18] [--iters 20]
         [--no-loop]   (OPD_STREAM_TRACE=1 with a `make BENCH=1` libopd:
                        libopd's steps, every 2000 calls)
Needs what bench_models needs; OPD_SOCKET, OPD_LIB as there.
"""
import argparse
import collections
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "bench"))  # _torchbench, bench_models
os.environ.setdefault("OPD_TORCH_C", "0")   # the Python path (see DESIGN)
import _torchbench as tb  # noqa: E402
import bench_models as bm  # noqa: E402

T = collections.defaultdict(float)   # level:op -> seconds
N = collections.defaultdict(int)
LAST = {}                            # op -> (args, kwargs) of its last call


class TimedOps:
    """Stands in for torch.ops.opd: times each call."""

    def __init__(self, ops):
        self._ops = ops

    def __getattr__(self, name):
        f = getattr(self._ops, name)

        def timed(*a, **k):
            LAST[name] = (a, k)
            t0 = time.perf_counter()
            r = f(*a, **k)
            T["call:" + name] += time.perf_counter() - t0
            N["call:" + name] += 1
            return r
        return timed


def patch_runner(tops):
    """Times OpRunner.call and the C call under it."""
    R = tops.OpRunner
    inner = R.call

    def call(self, c, *a, **k):
        fast = c._run_ptrs
        if fast and not getattr(fast, "_timed", False):
            def timed_fast(*fa):
                t0 = time.perf_counter()
                rc = fast(*fa)
                T["libopd"] += time.perf_counter() - t0
                N["libopd"] += 1
                return rc
            timed_fast._timed = True
            c._run_ptrs = timed_fast
        t0 = time.perf_counter()
        r = inner(self, c, *a, **k)
        T["runner"] += time.perf_counter() - t0
        N["runner"] += 1
        return r
    R.call = call


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="gpt2,resnet18")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--socket")
    ap.add_argument("--no-loop", action="store_true",
                    help="only the model's calls (for OPD_STREAM_TRACE's lines)")
    args = ap.parse_args()
    torch = bm.torch = tb.require_cuda_torch("probe_calls")
    opd, c = tb.connect("probe_calls", args.socket, bm.OPD_OPS)
    from opd import _torchops
    patch_runner(_torchops)
    bm.OPS = TimedOps(torch.ops.opd)
    dev = torch.device("cuda")
    for name in args.models.split(","):
        mt, mo, run, desc, _ = bm.BUILD[name](dev)
        with torch.no_grad():
            tb.set_tf32(torch, False)
            for _ in range(5):
                run(mt), run(mo)
            torch.cuda.synchronize()
            host = {}
            for label, m in (("torch", mt), ("opd", mo)):
                T.clear(), N.clear()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(args.iters):
                    run(m)
                host[label] = (time.perf_counter() - t0) / args.iters
                torch.cuda.synchronize()
            calls = {k: v for k, v in T.items()}
            ncalls = dict(N)
            it = args.iters
            tot_call = sum(v for k, v in calls.items() if k.startswith("call:"))
            print("%s: host per forward torch %.0f us, opd %.0f us (+%.0f); opd calls "
                  "%.0f us of it, the rest %.0f us" %
                  (name, host["torch"] * 1e6, host["opd"] * 1e6,
                   (host["opd"] - host["torch"]) * 1e6, tot_call * 1e6 / it,
                   (host["opd"] - tot_call / it) * 1e6))
            for k in sorted(calls):
                print("  %-18s %6d calls  mean %7.2f us" % (k, ncalls[k] // it,
                                                           calls[k] * 1e6 / ncalls[k]))
            # the same calls in a loop
            ops = torch.ops.opd
            for op, (a, k) in [] if args.no_loop else sorted(LAST.items()):
                f = getattr(ops, op)
                for _ in range(20):
                    f(*a, **k)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(200):
                    f(*a, **k)
                dt = (time.perf_counter() - t0) / 200
                torch.cuda.synchronize()
                print("  loop %-13s mean %7.2f us per call" % (op, dt * 1e6))
            if name == "gpt2" and "layernorm" in LAST and not args.no_loop:
                micro(torch, c, _torchops, *LAST["layernorm"])
            LAST.clear()
    return 0


def per(fn, n=2000):
    return tb.per_call(fn, n)


def micro(torch, c, tops, a, k):
    """The pieces of one layernorm call, in a loop: the whole call, the
    runner with the C call skipped, torch's own pieces."""
    import cProfile
    import io
    import pstats
    run = tops.OpRunner.call
    runner = next(r for n, r in __import__("opd.torch").torch._runners.items()
                  if n == "layernorm")
    full = per(lambda: torch.ops.opd.layernorm(*a, **k))
    torch.cuda.synchronize()
    real_fast = c._run_ptrs
    c._run_ptrs = lambda *fa: 0          # the C call skipped
    try:
        py = per(lambda: run(runner, c, a, k))
        disp = per(lambda: torch.ops.opd.layernorm(*a, **k))
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(3000):
            torch.ops.opd.layernorm(*a, **k)
        pr.disable()
    finally:
        c._run_ptrs = real_fast
    x = a[0]
    shape, dt = tuple(x.shape), x.dtype
    dev = torch.device("cuda:0")
    raw = torch._C._cuda_getCurrentRawStream
    print("micro layernorm: full call %.2f us; without the C call: through "
          "torch.ops %.2f us, runner alone %.2f us" % (full, disp, py))
    print("micro torch: empty(str dev) %.2f us, empty(device) %.2f us, "
          "empty_like %.2f us, raw stream %.2f us, data_ptr %.2f us, "
          "is_contiguous %.2f us, get_device %.2f us, .device %.2f us, "
          "F.layer_norm %.2f us" % (
              per(lambda: torch.empty(shape, dtype=dt, device="cuda:0")),
              per(lambda: torch.empty(shape, dtype=dt, device=dev)),
              per(lambda: torch.empty_like(x)), per(lambda: raw(0)),
              per(lambda: x.data_ptr()), per(lambda: x.is_contiguous()),
              per(lambda: x.get_device()), per(lambda: x.device),
              per(lambda: torch.nn.functional.layer_norm(x, (shape[-1],), a[1],
                                                         a[2], k.get("eps", 1e-5)))))
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(18)
    print("\n".join(ln for ln in out.getvalue().splitlines() if ln.strip())[:4000])


if __name__ == "__main__":
    sys.exit(main())
