#!/usr/bin/env python3
"""probe_level.py: which side of the hand-off makes ResNet-18's "slow level"
(a diagnostic for issue 13's ReLU line, docs/records/2026-12-01-stream-ordered-cost/README.md; the
speed claims stay in bench_models.py). At that level every gap between two
of torch's kernels in the opd forward is ~2.4 us against torch's 1.2, and
the C probes (probe_queue, probe_stretch) do not show it.

DESIGN
  stream  one process, the variants of ResNet-18's forward (batch 8, 224^2,
          TF32 off) rotated by _torchbench.measure (rounds of --iters
          forwards, one sync each), each ReLU module replaced by:
            torch     torch's relu_ (the model as it is)
            opd       torch.ops.opd.relu_ (bench_models' opd forward)
            ms        torch's relu_, then a 4-byte cuMemsetD32Async on
                      torch's stream into a word of this process's memory
            msipc     the same into a word of the daemon's memory (an opd
                      device tensor, mapped here by CUDA IPC, as libopd's
                      stream word is)
            msipc_k   that and a one-thread kernel (torch.cuda._sleep(1)),
                      libopd's memset and poll kernel without the daemon
            k         torch's relu_ and the one-thread kernel alone
            torch_s, opd_s  torch's and the opd forward on a stream made by
                      torch.cuda.Stream() instead of torch's default
            opd_direct, opd_side, opd_fork, opd_busy, opd_word  the opd forward on
                      torch's default stream, libopd's part of each call
                      placed as OPD_STREAM_LEGACY says (docs/async.md), set
                      in this process before each run (opd__stream_legacy,
                      in a `make BENCH=1` libopd);
                      "opd" then runs in the mode set last: do not mix them
          Says whether what libopd puts on the caller's stream, without the
          daemon, slows torch's kernels (--variants picks).
  hold    torch's forward and the opd one while a second process (spawned,
          its own opd session) holds: none (nothing), spin (a one-thread
          spinning kernel, ~20 ms, again and again, two ahead), opdspin
          (the spin with an ordered torch.ops.opd.relu_ behind each: the
          daemon's real shape, its wait kernel resident with the op and its
          word behind it as dependent launches; but the holder's own stream is
          then a resident spin with the memset and poll kernel behind it, as
          spin's), spinS and opdspinS (the same on a stream of the holder's
          own instead of torch's default stream), q:MODE (bench/probe_queue's holder in C: the daemon's
          shapes without the holder's side, e.g. q:pdl, q:pdlwe, q:spinq2).
          Rotated --repeat times. Says which shape slows torch's own kernels.

Run (under MPS, an opd daemon at $OPD_SOCKET, a CUDA build):
    python3 docs/records/2026-12-01-stream-ordered-cost/probe_level.py [--rounds 9] [--iters 10] [--skip stream|hold]
Prints "stream VARIANT ms=... host_ms=... x_torch=..." and
"hold HOLDER torch_ms=... opd_ms=... ratio=... torch_x_none=...".
"""
import argparse
import contextlib
import ctypes
import multiprocessing as mp
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "bench"))  # _torchbench, bench_models
import _torchbench as tb  # noqa: E402
import bench_models as bm  # noqa: E402

PROG = "probe_level"


def holder(kind, ready, stop, socket, cpus):
    """The second process: kind "spin" or "opdspin", until stop is set."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    import torch
    opd, c = tb.connect(PROG + " holder", socket, ("relu_",))
    side = kind.endswith("S")          # on a stream of its own, not torch's default
    ctx = torch.cuda.stream(torch.cuda.Stream()) if side else contextlib.nullcontext()
    with ctx:
        t = torch.zeros(1024, device="cuda")
        ops = torch.ops.opd
        ops.relu_(t)                     # the signature known to the daemon
        torch.cuda.synchronize()
        ready.set()
        evs = []
        while not stop.is_set():
            torch.cuda._sleep(40_000_000)         # ~20 ms at ~2 GHz
            if kind.startswith("opdspin"):
                ops.relu_(t)
            ev = torch.cuda.Event()
            ev.record()
            evs.append(ev)
            if len(evs) > 2:             # two ahead: the stream never runs dry
                evs.pop(0).synchronize()
        torch.cuda.synchronize()


def cu_memset():
    lib = ctypes.CDLL("libcuda.so.1")
    f = lib.cuMemsetD32Async
    f.argtypes = [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p]
    f.restype = ctypes.c_int
    return f


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=2, help="hold part rotations (2)")
    ap.add_argument("--skip", default="", help="comma-separated: stream, hold")
    ap.add_argument("--variants", default="opd,ms,msipc,msipc_k,k",
                    help="the stream part's variants besides torch: opd, torch_s and "
                    "opd_s (torch's and the opd forward on a stream of their own "
                    "instead of torch's default stream), opd_direct, opd_side, "
                    "opd_fork, opd_busy, ms, msipc, msipc_k, k")
    ap.add_argument("--holders", default="none,spin,opdspin",
                    help="the hold part's holders, comma-separated: none, spin, "
                    "opdspin, q:MODE (probe_queue hold MODE: pdl, pdle, pdlw, pdlwe, "
                    "spinq2, ...)")
    ap.add_argument("--probe-queue", default="build/bench/probe_queue",
                    help="probe_queue's path (q: holders)")
    ap.add_argument("--socket", default=os.environ.get("OPD_SOCKET"))
    ap.add_argument("--holder-cpus", default="12,13",
                    help="the CPUs the holder runs on, away from this process's "
                    "(12,13; '' for this process's own)")
    args = ap.parse_args()
    args.cpus = {int(v) for v in args.holder_cpus.split(",") if v}
    skip = set(s for s in args.skip.split(",") if s)
    torch = tb.require_cuda_torch(PROG)
    bm.torch = torch
    opd, c = tb.connect(PROG, args.socket, ("relu_",))
    bm.OPS = torch.ops.opd
    tb.header(PROG, torch, opd, c)
    dev = torch.device("cuda")
    mt, mo, run, desc, _ = bm.build_resnet18(dev, False)
    print("# resnet18: %s" % desc, flush=True)
    memset = cu_memset()
    set_legacy = tb.legacy_setter()
    local = torch.zeros(64, dtype=torch.int32, device=dev)
    ipc_t = c.empty((64,), "int32", device="cuda:0")
    ipc = ipc_t.torch()
    n = [0]

    def make(kind):
        class Fake(torch.nn.Module):
            def forward(self, x):
                x.relu_()
                s = torch.cuda.current_stream().cuda_stream
                if kind in ("ms", "msipc", "msipc_k"):
                    n[0] += 1
                    ptr = local.data_ptr() if kind == "ms" else ipc.data_ptr()
                    rc = memset(ptr, n[0] & 0x7fffffff, 1, s)
                    if rc:
                        raise RuntimeError("cuMemsetD32Async: %d" % rc)
                if kind in ("msipc_k", "k"):
                    torch.cuda._sleep(1)
                return x
        return lambda m: Fake()

    with torch.no_grad():
        tb.set_tf32(torch, False)
        want = run(mt)
        got = run(mo)
        torch.cuda.synchronize()
        err = tb.errors(torch, got, want)
        print("# opd forward against torch's: max_abs %.3g rel %.3g" % err[:2],
              flush=True)
        if "stream" not in skip:
            side = torch.cuda.Stream()

            def on_side(fn):
                def f():
                    with torch.cuda.stream(side):
                        fn()
                return f
            want_v = args.variants.split(",")
            variants = [("torch", lambda: run(mt))]
            if "opd" in want_v:
                variants.append(("opd", lambda: run(mo)))
            if "torch_s" in want_v:
                variants.append(("torch_s", on_side(lambda: run(mt))))
            if "opd_s" in want_v:
                variants.append(("opd_s", on_side(lambda: run(mo))))
            # opd_MODE: the opd forward with libopd's part of each call on
            # torch's default stream placed as OPD_STREAM_LEGACY=MODE says
            # (direct, side, fork, busy, word; docs/async.md), set before each run
            for v in want_v:
                if v.startswith("opd_") and v[4:] in tb.LEGACY_MODES:
                    variants.append((v, tb.in_mode(set_legacy, v[4:], lambda: run(mo))))
            if "opd_mix" in want_v:
                # torch's kernels on its default stream, each opd call on a
                # stream of its own, ordered both ways by events
                mixed = bm.inference_copy(mt)

                class Mix(torch.nn.Module):
                    def forward(self, x):
                        side.wait_stream(torch.cuda.default_stream())
                        with torch.cuda.stream(side):
                            torch.ops.opd.relu_(x)
                        torch.cuda.default_stream().wait_stream(side)
                        return x
                bm.replace(mixed, lambda x: isinstance(x, torch.nn.ReLU), lambda m: Mix())
                variants.append(("opd_mix", lambda: run(mixed)))
            for kind in ("ms", "msipc", "msipc_k", "k"):
                if kind not in want_v:
                    continue
                m = bm.inference_copy(mt)
                bm.replace(m, lambda x: isinstance(x, torch.nn.ReLU), make(kind))
                variants.append((kind, (lambda mm: lambda: run(mm))(m)))
            per = tb.measure(torch, variants, args.rounds, args.iters, args.warmup)
            base = tb.median(per["torch"])
            for name, _ in variants:
                ms = tb.median(per[name])
                print("stream %-8s ms=%.3f host_ms=%.3f x_torch=%.3f"
                      % (name, ms, tb.median(per[name + "@host"]), ms / base),
                      flush=True)
        if "hold" not in skip:
            kinds = [k for k in args.holders.split(",") if k]
            none_ms = None
            for r in range(args.repeat):
                for kind in kinds:
                    stop = start_holder(kind, args)
                    if stop is False:
                        continue
                    per = tb.measure(torch, [("torch", lambda: run(mt)),
                                             ("opd", lambda: run(mo))],
                                     args.rounds, args.iters, 3)
                    if stop is not None:
                        stop()
                    t, o = tb.median(per["torch"]), tb.median(per["opd"])
                    if kind == "none" or none_ms is None:
                        none_ms = t
                    print("hold %-9s run=%d torch_ms=%.3f opd_ms=%.3f ratio=%.3f "
                          "torch_x_none=%.3f torch_host_ms=%.3f opd_host_ms=%.3f"
                          % (kind, r, t, o, o / t, t / none_ms,
                             tb.median(per["torch@host"]), tb.median(per["opd@host"])),
                          flush=True)


def start_holder(kind, args):
    """Starts the holder of kind; returns a function that stops it, None for
    "none", False when it did not start."""
    if kind == "none":
        return None
    if kind.startswith("q:"):          # probe_queue's holder, in C
        cpus = args.cpus
        p = subprocess.Popen([args.probe_queue, "hold", kind[2:]],
                             stdout=subprocess.PIPE,
                             preexec_fn=(lambda: os.sched_setaffinity(0, cpus))
                             if cpus else None)
        if p.stdout.read(1) != b"\x01":
            print("hold %s: %s did not start" % (kind, args.probe_queue))
            p.kill()
            p.wait()
            return False
        time.sleep(0.3)

        def stop_q():
            p.terminate()
            p.wait(60)
        return stop_q
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    p = ctx.Process(target=holder, args=(kind, ready, stop, args.socket, args.cpus))
    p.start()
    if not ready.wait(120):
        print("hold %s: the holder did not start" % kind)
        p.terminate()
        return False
    time.sleep(0.3)

    def stop_p():
        stop.set()
        p.join(60)
    return stop_p


if __name__ == "__main__":
    main()
