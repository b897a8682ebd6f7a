"""Where the time of an asynchronous torch.ops.opd call goes,
against torch's own op in the same run, on torch CUDA tensors:
  host   the CPU cost of one call (N calls enqueued back to back, no sync,
         divided by N) for opd and for torch;
  gpu    a chain of N dependent ops alternating torch and opd (each op
         waits for the one before, across the processes) against the same
         chain all in torch: the per-op extra of a cross-process hop;
  tiny   a chain of 8 dependent tiny ops (1x1024) enqueued then one
         torch.cuda.synchronize(), opd against torch.
Medians of R rounds; ratios opd / torch.
  OPD_SOCKET=... python3 bench/bench_async_ops.py [-n 200] [-r 9]
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("-r", type=int, default=9)
    ap.add_argument("--numel", type=int, default=1 << 20)
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("skip: no torch")
        return 0
    if not torch.cuda.is_available():
        print("skip: torch sees no CUDA device")
        return 0
    import opd
    import opd.torch  # noqa: F401  registers torch.ops.opd
    ops = torch.ops.opd
    dev = "cuda:0"
    x = torch.randn(a.numel, device=dev)
    t = torch.randn(1, 1024, device=dev)

    def timed(fn, sync_each=False):
        best = []
        for _ in range(a.r):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            best.append((t1 - t0, t2 - t0))
        return (statistics.median(b[0] for b in best),
                statistics.median(b[1] for b in best))

    def host_opd():
        for _ in range(a.n):
            ops.relu_(x)

    def host_torch():
        for _ in range(a.n):
            torch.relu_(x)

    def chain_mixed():
        for _ in range(a.n // 2):
            x.mul_(1.0001)
            ops.relu_(x)

    def chain_torch():
        for _ in range(a.n // 2):
            x.mul_(1.0001)
            torch.relu_(x)

    def tiny_opd():
        y = t
        for _ in range(4):
            y = ops.softmax(y)
            y = ops.gelu(y, approximate="tanh")
        return y

    def tiny_torch():
        y = t
        for _ in range(4):
            y = torch.softmax(y, -1)
            y = torch.nn.functional.gelu(y, approximate="tanh")
        return y

    for f in (host_opd, host_torch, chain_mixed, chain_torch, tiny_opd, tiny_torch):
        f()  # warm up (imports, plans)
    torch.testing.assert_close(tiny_opd(), tiny_torch(), rtol=1e-5, atol=1e-6)
    ho, ht = timed(host_opd), timed(host_torch)
    cm, ct = timed(chain_mixed), timed(chain_torch)
    reps = 200

    def tiny_loop(fn):
        def run():
            for _ in range(reps):
                fn()
                torch.cuda.synchronize()
        return run
    to, tt = timed(tiny_loop(tiny_opd)), timed(tiny_loop(tiny_torch))
    n = a.n
    print("# bench_async_ops: torch %s, %s, n=%d, numel=%d, rounds=%d"
          % (torch.__version__, torch.cuda.get_device_name(0), n, a.numel, a.r))
    print("host cost per call (enqueue only): opd %.1f us, torch %.1f us, "
          "ratio %.2f" % (ho[0] / n * 1e6, ht[0] / n * 1e6, ho[0] / ht[0]))
    print("relu_ %d calls to completion: opd %.1f us/op, torch %.1f us/op"
          % (n, ho[1] / n * 1e6, ht[1] / n * 1e6))
    print("chain torch mul_ + relu_ x%d, to completion: opd relu_ %.1f us/pair, "
          "all torch %.1f us/pair, ratio %.2f"
          % (n // 2, cm[1] / (n // 2) * 1e6, ct[1] / (n // 2) * 1e6, cm[1] / ct[1]))
    print("chain of 8 tiny ops + synchronize: opd %.1f us, torch %.1f us, "
          "ratio %.2f" % (to[1] / reps * 1e6, tt[1] / reps * 1e6, to[1] / tt[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
