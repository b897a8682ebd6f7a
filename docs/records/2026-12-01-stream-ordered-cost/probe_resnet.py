#!/usr/bin/env python3
"""probe_resnet.py: where ResNet-18's forward through opd spends its GPU
time, against torch's own (a diagnostic for issue 13's ReLU line; the
speed claims stay in bench_models.py).

DESIGN
  spin     torch's own resnet18 forward (ms, medians of rounds as
           bench_models) alone, then with a one-thread spinning kernel
           (torch.cuda._sleep) resident on the GPU the whole time: on a
           side stream of this process, and from another process (under
           MPS that is what the daemon's wait kernel is while it polls),
           alone and with three small kernels queued behind it there (as
           the daemon's op and word are behind its wait kernel).
           Says whether a resident spinner slows torch's own kernels.
  profile  torch.profiler (CUPTI) over --iters forwards of each model, the
           torch one and the one with every ReLU through opd: per forward
           the GPU span, the busy time of this process's kernels by kind
           (conv, batchnorm, relu, libopd's poll kernel, memsets, other),
           and per opd call the span from libopd's memset (the stream's
           word) to the end of its poll kernel: what one call costs this
           process's stream on the GPU (the daemon's wait, op and word
           inside it), against torch's relu kernel plus the gap before it;
           per position in the forward; the parts of a call (pre: the gap
           after the kernel before it, the memset, the poll kernel, the gap
           between them, post: the gap before the next kernel; torch: pre,
           relu, post), medians; and (--dump D) every event to D.0.json /
           D.1.json.
  chain    per ReLU shape of ResNet-18, the GPU pace of a chain of relu_
           calls queued behind a long spin (the slope from 8 to 40 calls,
           so the host is never the limit): torch's relu_, torch.ops.opd's
           one by one, and in opd.torch.batch().
  rounds   bench_models' rounds (10 and 30 forwards, one sync), with a CUDA
           event between forwards: each forward's GPU time by its place in
           the round; then bench_models' own timing ("timed").
  xread    per ReLU shape, the GPU time of a 3x3 convolution and an add
           that read the ReLU's output, when torch wrote it, when the daemon
           did (through its CUDA IPC mapping), and when torch wrote it again
           after the daemon: whether reading what another process wrote
           costs torch's kernels time.
--skip takes any of spin, chain, profile (profile and everything after it),
profile2 (the two CUPTI profiles only), xread.
Usage: python3 docs/records/2026-12-01-stream-ordered-cost/probe_resnet.py [--iters 10] [--rounds 9] [--socket P]
         [--skip spin,chain,profile,profile2,xread] [--dump D]
"""
import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "bench"))  # _torchbench, bench_models
import _torchbench as tb  # noqa: E402
import bench_models as bm  # noqa: E402

PROG = "probe_resnet"


def spinner(ready, stop, queued=0):
    """queued: that many small kernels wait on the stream behind each spin
    (as the daemon's op and word wait behind its wait kernel)"""
    import torch
    torch.cuda.init()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = torch.zeros(1024, device="cuda")
        torch.cuda._sleep(1000)
        torch.cuda.synchronize()
        ready.set()
        other = torch.cuda.Stream()
        ev = torch.cuda.Event()
        while not stop.is_set():
            torch.cuda._sleep(200_000_000)     # ~100 ms at ~2 GHz
            if queued >= 0:
                for _ in range(queued):
                    y.relu_()
            else:      # -n: n kernels on another stream, waiting for an event after the spin
                ev.record(s)
                other.wait_event(ev)
                with torch.cuda.stream(other):
                    for _ in range(-queued):
                        y.relu_()
            s.synchronize()
            other.synchronize()


def timed(torch, fn, rounds, iters):
    per = tb.measure(torch, [("x", fn)], rounds, iters, 3)
    return statistics.median(per["x"])


def spin_part(torch, mt, run, args):
    f = lambda: run(mt)  # noqa: E731
    base = timed(torch, f, args.rounds, args.iters)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(4_000_000_000)       # a few seconds
    inproc = timed(torch, f, args.rounds, args.iters)
    side.synchronize()
    ctx = mp.get_context("spawn")
    other = []
    for queued in (0, 3, 1, 30, -3):
        ready, stop = ctx.Event(), ctx.Event()
        p = ctx.Process(target=spinner, args=(ready, stop, queued))
        p.start()
        ready.wait(60)
        time.sleep(0.2)
        other.append(timed(torch, f, args.rounds, args.iters))
        stop.set()
        p.join(30)
    after = timed(torch, f, args.rounds, args.iters)
    print("spin torch_ms=%.3f side_stream_spinner_ms=%.3f (x%.3f) other_process_"
          "spinner_ms=%.3f (x%.3f) with_3_kernels_queued_behind_it_ms=%.3f (x%.3f) "
          "with_1_ms=%.3f (x%.3f) with_30_ms=%.3f (x%.3f) 3_on_a_stream_waiting_for_"
          "an_event_after_it_ms=%.3f (x%.3f) after_ms=%.3f" % (
              base, inproc, inproc / base, other[0], other[0] / base,
              other[1], other[1] / base, other[2], other[2] / base,
              other[3], other[3] / base, other[4], other[4] / base, after), flush=True)


def kind(name):
    n = name.lower()
    if n.startswith("opd_poll"):
        return "poll"
    if "memset" in n:
        return "memset"
    if "batch_norm" in n or "batchnorm" in n or "bn_fw" in n:
        return "bn"
    if "relu" in n or "clamp" in n or "threshold" in n:
        return "relu"
    if ("conv" in n or "cudnn" in n or "xmma" in n or "gemm" in n or "implicit" in n
            or "winograd" in n or "fft" in n or "sm90" in n or "cutlass" in n):
        return "conv"
    return "other"


def gpu_events(torch, fn, iters):
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    path = tempfile.mktemp(suffix=".json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        doc = json.load(f)
    os.unlink(path)
    ev = []
    for e in doc.get("traceEvents", []):
        cat = str(e.get("cat", "")).lower()
        if e.get("ph") != "X" or cat not in ("kernel", "gpu_memset", "gpu_memcpy"):
            continue
        name = e.get("name", "")
        k = "memset" if cat == "gpu_memset" else kind(name)
        ev.append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), k, name))
    ev.sort()
    return ev


def per_call(ev, opd):
    """Per ReLU (torch) or opd call, in forward order: the time this
    stream spends from the end of the torch kernel before it to the start
    of the torch kernel after it, and for opd whether it had a memset."""
    out = []
    i = 0
    n = len(ev)
    while i < n:
        k = ev[i][2]
        if not opd and k == "relu":
            if 0 < i < n - 1:
                out.append((ev[i + 1][0] - ev[i - 1][1], 0))
            i += 1
            continue
        if opd and k in ("memset", "poll"):
            j = i
            had = 0
            while j < n and ev[j][2] in ("memset", "poll"):
                had |= ev[j][2] == "memset"
                j += 1
            if 0 < i and j < n:
                out.append((ev[j][0] - ev[i - 1][1], had))
            i = j
            continue
        i += 1
    return out


def call_parts(ev, opd):
    """Per ReLU (torch) or opd call, where its time on this stream goes:
    pre (the end of the kernel before it to its first event), the time
    inside its events (torch's relu kernel; libopd's memset and poll
    kernel), the gaps between them, post (its last event's end to the
    next kernel's start); lists of us, keyed by part."""
    out = {"pre": [], "memset": [], "poll": [], "relu": [], "inner_gap": [], "post": []}
    i, n = 1, len(ev)
    while i < n - 1:
        k = ev[i][2]
        if (not opd and k == "relu") or (opd and k in ("memset", "poll")):
            j = i
            while j < n and (ev[j][2] in ("memset", "poll") if opd else j == i):
                out[ev[j][2]].append(ev[j][1] - ev[j][0])
                if j > i:
                    out["inner_gap"].append(ev[j][0] - ev[j - 1][1])
                j += 1
            if j < n:
                out["pre"].append(ev[i][0] - ev[i - 1][1])
                out["post"].append(ev[j][0] - ev[j - 1][1])
            i = j
            continue
        i += 1
    return out


def profile_part(torch, name, fn, iters, opd, dump):
    ev = gpu_events(torch, fn, iters)
    if not ev:
        print("profile %s: no GPU events (CUPTI not there?)" % name)
        return None
    span = (ev[-1][1] - ev[0][0]) / iters
    busy = {}
    for s, e, k, _ in ev:
        busy[k] = busy.get(k, 0.0) + (e - s)
    gaps = [ev[i + 1][0] - ev[i][1] for i in range(len(ev) - 1)]
    calls = per_call(ev, opd)
    parts = call_parts(ev, opd)
    line = "profile %s span_us=%.1f kernels_per_forward=%.1f gap_med_us=%.2f" % (
        name, span, len(ev) / iters, statistics.median(gaps) if gaps else 0)
    line += " " + " ".join("%s_us=%.1f" % (k, v / iters) for k, v in sorted(busy.items()))
    if calls:
        cs = sorted(c for c, _ in calls)
        line += " call_us med=%.2f p10=%.2f p90=%.2f sum/fwd=%.1f n=%d with_memset=%d" % (
            statistics.median(cs), cs[len(cs) // 10], cs[len(cs) * 9 // 10],
            sum(cs) / iters, len(cs), sum(h for _, h in calls))
    if parts:
        line += " parts_us(med) " + " ".join(
            "%s=%.2f" % (k, statistics.median(v)) for k, v in parts.items() if v)
    print(line, flush=True)
    dump[name] = {"calls": calls, "kinds": "".join(k[0] for _, _, k, _ in ev[:200]),
                  "ev": [(round(s, 3), round(e, 3), k) for s, e, k, _ in ev]}
    return {"span": span, "busy": busy, "calls": calls}


SHAPES = ((8, 64, 112, 112), (8, 64, 56, 56), (8, 128, 28, 28), (8, 256, 14, 14),
          (8, 512, 7, 7))


def gpu_chain(torch, queue, n, sleep_cycles, reps=9):
    """GPU time (us) from the end of a long spin on the stream to the end
    of n queued calls (queue(n) queues them): the calls all wait behind the
    spin, so this is the GPU's own pace, not the host's."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = []
    for _ in range(reps):
        torch.cuda._sleep(sleep_cycles)
        a.record()
        queue(n)
        b.record()
        b.synchronize()
        t.append(a.elapsed_time(b) * 1e3)
    return statistics.median(t)


def chain_part(torch, opd_torch):
    """Per ResNet ReLU shape: the GPU time per call of a chain of relu_ calls
    (the slope between 8 and 40 calls) and the intercept (what is paid once),
    for torch's relu_, torch.ops.opd.relu_ one by one, and in a batch."""
    ops = torch.ops.opd
    for shp in SHAPES:
        x = torch.randn(*shp, device="cuda")

        def tq(n):
            for _ in range(n):
                torch.relu_(x)

        def oq(n):
            for _ in range(n):
                ops.relu_(x)

        def bq(n):
            with opd_torch.batch():
                for _ in range(n):
                    ops.relu_(x)
        out = []
        for name, q in (("torch", tq), ("opd", oq), ("batch", bq)):
            q(2)
            torch.cuda.synchronize()
            lo, hi = gpu_chain(torch, q, 8, 8_000_000), gpu_chain(torch, q, 40, 8_000_000)
            per = (hi - lo) / 32
            out.append("%s per_call_us=%.2f once_us=%.1f" % (name, per, lo - 8 * per))
        print("chain shape=%s %s" % ("x".join(map(str, shp)), "  ".join(out)), flush=True)


def xread_part(torch, reps=40):
    """Per ReLU shape of ResNet-18: the GPU time of torch's kernels that
    read a tensor the ReLU wrote, when torch wrote it (torch.relu_) and
    when the daemon did (torch.ops.opd.relu_, another process through its
    CUDA IPC mapping), and when torch wrote it again after the daemon
    (relu_ twice): a 3x3 convolution (cuDNN) and an add, timed by CUDA
    events around each alone (medians of reps, us)."""
    ops = torch.ops.opd
    for shp in SHAPES[1:]:
        c = shp[1]
        x = torch.randn(*shp, device="cuda")
        bn = torch.nn.BatchNorm2d(c).cuda().eval()
        conv = torch.nn.Conv2d(c, c, 3, padding=1, bias=False).cuda().eval()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        out = []
        for name in ("torch", "opd", "opd+torch"):
            tc, ta = [], []
            for r in range(reps + 3):
                y = bn(x)
                if name == "torch":
                    torch.relu_(y)
                else:
                    ops.relu_(y)
                    if name == "opd+torch":
                        torch.relu_(y)
                ev[0].record()
                z = conv(y)
                ev[1].record()
                ev[2].record()
                w = z + y
                ev[3].record()
                ev[3].synchronize()
                if r >= 3:
                    tc.append(ev[0].elapsed_time(ev[1]) * 1e3)
                    ta.append(ev[2].elapsed_time(ev[3]) * 1e3)
                del w
            out.append("%s conv_us=%.2f add_us=%.2f" % (name, statistics.median(tc),
                                                        statistics.median(ta)))
        print("xread shape=%s %s" % ("x".join(map(str, shp)), "  ".join(out)), flush=True)


def rounds_part(torch, variants, rounds, iters):
    """bench_models' rounds (iters forwards, one sync), with a CUDA event
    between forwards: the GPU time of each forward by its place in the
    round (medians over rounds), variants alternating as there."""
    per = {n: [[] for _ in range(iters)] for n, _ in variants}
    host = {n: [] for n, _ in variants}
    for r in range(rounds):
        for name, fn in (variants if r % 2 == 0 else variants[::-1]):
            evs = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for i in range(iters):
                evs[i].record()
                fn()
            evs[iters].record()
            host[name].append((time.perf_counter() - t0) * 1e3 / iters)
            torch.cuda.synchronize()
            for i in range(iters):
                per[name][i].append(evs[i].elapsed_time(evs[i + 1]) * 1e3)
    for name, _ in variants:
        med = [statistics.median(v) for v in per[name]]
        print("rounds %s host_ms=%.3f per forward us by place: %s" % (
            name, statistics.median(host[name]), " ".join("%.0f" % m for m in med)))
    return per


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--socket", default=os.environ.get("OPD_SOCKET"))
    ap.add_argument("--skip", default="", help="any of spin,chain,profile,profile2,xread")
    ap.add_argument("--dump", help="write the profiles' events to DUMP.N.json")
    args = ap.parse_args()
    torch = tb.require_cuda_torch(PROG)
    bm.torch = torch
    tb.set_tf32(torch, False)
    dev = torch.device("cuda", 0)
    skip = set(args.skip.split(","))
    with torch.no_grad():
        if "spin" not in skip:
            import torchvision
            torch.manual_seed(0)
            mt0 = torchvision.models.resnet18(weights=None).to(dev).eval()
            x0 = torch.randn(8, 3, 224, 224, device=dev)
            spin_part(torch, mt0, lambda m: m(x0), args)
        if "profile" in skip:
            return 0
        opd, c = tb.connect(PROG, args.socket, ("relu_",))
        bm.OPS = torch.ops.opd
        if "chain" not in skip:
            import opd.torch as opd_torch
            chain_part(torch, opd_torch)
        mt, mo, run, desc, _ = bm.build_resnet18(dev, False)
        print("# %s" % desc)
        for _ in range(10):
            run(mt)
            run(mo)
        torch.cuda.synchronize()
        for it in (10, 30):
            rounds_part(torch, [("torch", lambda: run(mt)), ("opd", lambda: run(mo))],
                        args.rounds, it)
        dump = {}
        for rep in range(2 if "profile2" not in skip else 0):
            t = profile_part(torch, "torch", lambda: run(mt), args.iters, False, dump)
            o = profile_part(torch, "opd", lambda: run(mo), args.iters, True, dump)
            if args.dump:
                with open("%s.%d.json" % (args.dump, rep), "w") as f:
                    json.dump(dump, f)
            if t and o and t["calls"] and o["calls"]:
                # per position in the forward (17 calls a forward)
                tc = [c for c, _ in t["calls"]]
                oc = [c for c, _ in o["calls"]]
                m = min(len(tc), len(oc)) // 17 * 17
                pos = []
                for p in range(17):
                    a = sorted(tc[p:m:17]) or [0]
                    b = sorted(oc[p:m:17]) or [0]
                    pos.append("%d:%.1f/%.1f" % (p, a[len(a) // 2], b[len(b) // 2]))
                print("  per call (torch/opd us, medians over forwards): " + " ".join(pos))
            if t and o:
                print("profile ratio span opd/torch=%.3f; torch kernels (not relu) "
                      "opd/torch busy=%.3f" % (
                          o["span"] / t["span"],
                          sum(v for k, v in o["busy"].items() if k not in ("relu", "poll", "memset"))
                          / max(1e-9, sum(v for k, v in t["busy"].items() if k != "relu"))))
        if "xread" not in skip:
            xread_part(torch)
        per = tb.measure(torch, [("torch", lambda: run(mt)), ("opd", lambda: run(mo))],
                         args.rounds, args.iters, 3)
        print("timed torch_ms=%.3f opd_ms=%.3f ratio=%.3f torch_host_ms=%.3f "
              "opd_host_ms=%.3f" % (
                  statistics.median(per["torch"]), statistics.median(per["opd"]),
                  statistics.median(per["opd"]) / statistics.median(per["torch"]),
                  statistics.median(per["torch@host"]), statistics.median(per["opd@host"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
