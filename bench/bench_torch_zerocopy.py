"""bench_torch_zerocopy: torch.ops.opd.softmax on CPU tensors that reach
the daemon with no copy, against torch's softmax in this process, over
spinning and adaptive rings, in the same run.

DESIGN
For each transport (a connection per transport, opd.torch.register(c)
binding the ops to it; the daemon must grant spin: start it with `--spin
always` on a small machine) and each shape (1x1024, 2048x2048) the cases
are the same values as
  torch      torch.softmax(x, -1), in this process (a new output per call),
             on torch's threads (every CPU; the ratios are to this)
  torch1t    the same on one thread (a reference that a loaded machine,
             where torch's threads wait for each other, slows less)
  staged     torch.ops.opd.softmax(x) on a plain torch tensor: the input is
             copied into shared memory per call (the fallback)
  empty      on opd.torch.empty(...) memory: no copy in
  shm_fd     on a tensor after share_memory_() under torch's
             file_descriptor sharing strategy: no copy in
  shm_fs     the same under the file_system strategy
Each opd case returns a new torch output per call, as torch's does (the
outputs are views of opd's shared memory; a plan reuses the last call's
output memory when nothing holds it any more). Each case runs one call at
a time after a warm-up (WARMUP_S of calls), in alternating blocks (a shared machine's drift
lands on all cases alike); a line per transport and shape gives each
case's median and its ratio to torch's median of the same run, and the
staging copies the zero-copy cases caused (opd.torch.staging(): must be
0). Every case's result is checked against torch's first (exit 1 on a
mismatch, or on a staging copy in a zero-copy case).

    softmax transport=spin shape=1x1024 torch_us=... empty_us=... empty/torch=... staged_copies_zero_copy=0

Usage: OPD_SOCKET=... python bench/bench_torch_zerocopy.py [-n REPS]
       [--transports spin,adaptive] [--cpu-kernels]
--cpu-kernels turns on libopd's C kernel for torch's CPU key
(opd.torch.cpu_kernels): the zero-copy cases then run with no Python in
the call; the staged case still runs the Python kernel (called back).
Needs torch >= 2.4 (opd.torch) and numpy.
"""
import argparse
import datetime
import os
import platform
import statistics
import sys
import time

import torch
import torch.multiprocessing as tmp

import opd
import opd.torch as ot

BLOCKS = 5
WARMUP_S = 0.5
SHAPES = ((1, 1024), (2048, 2048))
ZERO_COPY = ("empty", "shm_fd", "shm_fs")


def timed(fn, reps):
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def shared(x, strategy):
    """A copy of x in shared memory under torch's sharing `strategy`."""
    old = tmp.get_sharing_strategy()
    tmp.set_sharing_strategy(strategy)
    try:
        return x.clone().share_memory_()
    finally:
        tmp.set_sharing_strategy(old)


def run_case(transport, shape, reps):
    x = torch.randn(*shape)
    e = ot.empty(*shape)
    e.copy_(x)
    inputs = {"staged": x, "empty": e, "shm_fd": shared(x, "file_descriptor"),
              "shm_fs": shared(x, "file_system")}
    want = torch.softmax(x, -1)
    for name, t in inputs.items():
        got = torch.ops.opd.softmax(t)
        err = (got - want).abs().max().item()
        if err > 1e-5:
            print("error: %s %s: max |opd - torch| = %g" % (name, shape, err),
                  file=sys.stderr)
            sys.exit(1)
    fns = [("torch", lambda: torch.softmax(x, -1))]
    fns += [(n, (lambda t=t: torch.ops.opd.softmax(t))) for n, t in inputs.items()]
    for _, f in fns:              # warm-up: plans made, the transport settled
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < WARMUP_S:
            f()
    fns.insert(1, ("torch1t", fns[0][1]))
    times = {n: [] for n, _ in fns}
    copies = {n: 0 for n, _ in fns}
    per = max(1, reps // BLOCKS)
    threads = torch.get_num_threads()
    for _ in range(BLOCKS):
        for n, f in fns:
            before = ot.staging()[0]
            if n == "torch1t":
                torch.set_num_threads(1)
            times[n] += timed(f, per)
            torch.set_num_threads(threads)
            copies[n] += ot.staging()[0] - before
    med = {n: statistics.median(v) * 1e6 for n, v in times.items()}
    zc = sum(copies[n] for n in ZERO_COPY)
    parts = ["%s_us=%.1f" % (n, med[n]) for n, _ in fns]
    parts += ["%s/torch=%.2f" % (n, med[n] / med["torch"]) for n, _ in fns[1:]]
    print("softmax transport=%s shape=%dx%d %s staged_copies=%d "
          "staged_copies_zero_copy=%d" % (transport, shape[0], shape[1],
                                          " ".join(parts), copies["staged"], zc),
          flush=True)
    return zc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--transports", default="spin,adaptive")
    ap.add_argument("--cpu-kernels", action="store_true",
                    help="libopd's C kernel for torch's CPU key "
                    "(opd.torch.cpu_kernels): the calls on shared memory "
                    "run with no Python")
    a = ap.parse_args()
    print("# bench_torch_zerocopy %s" % " ".join(sys.argv[1:]))
    print("# date %s" % datetime.datetime.now(datetime.timezone.utc)
          .strftime("%Y-%m-%dT%H:%M:%SZ"))
    print("# machine %s, %d CPUs, %s; torch %s (%d threads), python %s"
          % (platform.node(), os.cpu_count(), platform.platform(),
             torch.__version__, torch.get_num_threads(), platform.python_version()))
    bad = 0
    prev = ot._client          # the import's connection, if it made one
    for transport in a.transports.split(","):
        c = opd.connect(wait=transport)
        got = c.transport
        if got != transport:
            print("# transport: asked %s, got %s (%s)" % (transport, got,
                                                          c.transport_why))
        ot.register(c)
        if a.cpu_kernels:
            ot.cpu_kernels(True)
        if prev is not None:   # one connection at a time: no idle one beside
            prev.close()
        prev = c
        for shape in SHAPES:
            reps = a.n if shape[0] * shape[1] <= 1 << 16 else max(BLOCKS * 4, a.n // 50)
            bad += run_case(got, shape, reps)
        ot.flush_staging()
        st = c.stats()
        print("# daemon stats: staging %s shm %s" % (st.get("staging"), st.get("shm")))
    if bad:
        print("error: %d staging copies in the zero-copy cases" % bad, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
