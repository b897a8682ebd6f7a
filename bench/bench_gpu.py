#!/usr/bin/env python3
"""bench_gpu.py: the opd Python package on the GPU, against torch, on the
GPU machine. One `key=value` line per measurement.

DESIGN
Phases, each in try/except (an `error` line, then the next phase), the
whole run bounded (about 4 minutes at the defaults):

  tiny      softmax of 1x1024 float32, timed one call at a time
            (perf_counter_ns) over --calls calls after a warm-up:
              opd        c.softmax(x, out=y) on device tensors of this
                         process's connection (the request, the launch and
                         the completion, through the socket)
              opd_high   the same on a priority="high" connection
              opd_alloc  c.softmax(x): the output allocated per call
              opd_ping   c.ping(): the round trip alone
              torch      torch.softmax(x, -1) + torch.cuda.synchronize()
                         in this process
            p50/p99/mean in microseconds.
  workers16 --workers processes (multiprocessing, spawn) each looping a
            softmax of 8192x1024 float32 with the result complete after
            each call, for --seconds seconds after all are ready:
              opd        each worker holds device tensors in the daemon and
                         calls c.softmax(x, out=y); no CUDA in the workers
              torch      each worker runs torch on the GPU itself
                         (torch.softmax + torch.cuda.synchronize())
              torch_mps  the same under MPS, if nvidia-cuda-mps-control -d
                         starts (private pipe and log directories under
                         /tmp; stopped with `quit` afterwards)
            aggregate ops/s (sum over workers of calls / own elapsed), and
            GPU memory: nvidia-smi's memory.used while the workers run,
            minus the figure before they started (gpu_mem_mib), and the
            absolute figure (gpu_mem_total_mib).

Usage: bench_gpu.py [--socket PATH] [--calls 5000] [--workers 16]
                    [--seconds 5] [--skip tiny,workers16,mps] [--gpus 2]
  --gpus N  after the one-GPU runs, the same workers spread over N GPUs
            (worker i on cuda:i%N), and each impl's ratio against one GPU
Needs a daemon with a CUDA device ($OPD_SOCKET or --socket), numpy and
torch; PYTHONPATH=python and OPD_LIB=build/libopd.so in a checkout.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import numpy as np  # noqa: E402

import opd  # noqa: E402

T0 = time.monotonic()


def out(line):
    print("gpu " + line, flush=True)


def err(phase, e):
    msg = ("%s: %s" % (type(e).__name__, e)).replace("\n", " ")[:300]
    out("bench=%s error=%r" % (phase, msg))
    traceback.print_exc(file=sys.stderr)


def pct(ts_ns):
    ts = sorted(ts_ns)
    n = len(ts)
    return ("p50_us=%.1f p99_us=%.1f mean_us=%.1f n=%d"
            % (ts[n // 2] / 1e3, ts[min(n - 1, n * 99 // 100)] / 1e3,
               sum(ts) / n / 1e3, n))


def timed(fn, calls, warm=200):
    for _ in range(warm):
        fn()
    pc = time.perf_counter_ns
    ts = []
    for _ in range(calls):
        t = pc()
        fn()
        ts.append(pc() - t)
    return ts


def gpu_mem_mib():
    """memory.used of GPU 0 in MiB (nvidia-smi), or None."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                            "--format=csv,noheader,nounits", "-i", "0"],
                           capture_output=True, text=True, timeout=20)
        return float(r.stdout.strip().splitlines()[0])
    except Exception:
        return None


# ---- tiny op ---------------------------------------------------------------------

def bench_tiny(sock, calls):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 1024)).astype(np.float32)
    for impl, prio in (("opd", None), ("opd_high", "high")):
        try:
            with opd.connect(sock, priority=prio) as c:
                x = c.from_numpy(a, device="cuda")
                y = c.empty((1, 1024), "float32", device="cuda")
                ts = timed(lambda: c.softmax(x, out=y), calls)
                e = np.exp(a - a.max())
                ok = np.allclose(y.numpy(), e / e.sum(), atol=1e-6)
                out("bench=tiny impl=%s op=softmax shape=1x1024 %s correct=%d"
                    % (impl, pct(ts), ok))
                if impl == "opd":
                    run = c.prepare("softmax", x, out=y)
                    ts = timed(run, calls)
                    out("bench=tiny impl=opd_prepared op=softmax shape=1x1024 %s"
                        % pct(ts))
                    run.close()
                    ts = timed(lambda: c.softmax(x), calls)
                    out("bench=tiny impl=opd_alloc op=softmax shape=1x1024 %s" % pct(ts))
                    ts = timed(c.ping, calls)
                    out("bench=tiny impl=opd_ping %s" % pct(ts))
        except Exception as e:
            err("tiny impl=" + impl, e)
    try:
        import torch
        x = torch.from_numpy(a).cuda()

        def step():
            torch.softmax(x, -1)
            torch.cuda.synchronize()
        ts = timed(step, calls)
        out("bench=tiny impl=torch op=softmax shape=1x1024 %s" % pct(ts))
    except Exception as e:
        err("tiny impl=torch", e)


# ---- 16 workers ------------------------------------------------------------------

ROWS, COLS = 8192, 1024


def worker(impl, sock, seconds, ready, start, results, idx, gpus=1):
    """One worker: set up, say ready, wait for start, loop, report. With
    gpus > 1, worker idx uses GPU idx % gpus (the daemon's cuda:N for opd,
    torch's for torch: the same cards when both see the same devices)."""
    dev = "cuda:%d" % (idx % gpus)
    try:
        if impl == "opd":
            c = opd.connect(sock)
            a = np.random.default_rng(idx).standard_normal((ROWS, COLS)).astype(np.float32)
            x = c.from_numpy(a, device=dev)
            y = c.empty((ROWS, COLS), "float32", device=dev)

            def step():
                c.softmax(x, out=y)
        else:
            import torch
            x = torch.randn((ROWS, COLS), device=dev)

            def step():
                torch.softmax(x, -1)
                torch.cuda.synchronize()
        for _ in range(20):
            step()
        ready.put(("ready", idx, os.getpid()))
        if not start.wait(120):
            results.put(("error", idx, "no start signal"))
            return
        n, t0 = 0, time.perf_counter()
        end = t0 + seconds
        while True:
            step()
            n += 1
            if (n & 7) == 0 and time.perf_counter() >= end:
                break
        results.put(("ok", idx, n, time.perf_counter() - t0))
    except BaseException as e:
        try:
            ready.put(("error", idx, repr(e)))
            results.put(("error", idx, repr(e)))
        except Exception:
            pass


def run_workers(impl, label, sock, n, seconds, gpus=1):
    """Runs n workers of impl on `gpus` GPUs; prints their line and returns
    the aggregate ops/s."""
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    start = ctx.Event()
    before = gpu_mem_mib()
    procs = [ctx.Process(target=worker, args=(impl, sock, seconds, ready, start,
                                              results, i, gpus), daemon=True)
             for i in range(n)]
    try:
        for p in procs:
            p.start()
        got, errors = 0, []
        deadline = time.monotonic() + 120
        while got + len(errors) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("%d of %d workers ready after 120 s"
                                   % (got, n))
            r = ready.get(timeout=left)
            if r[0] == "ready":
                got += 1
            else:
                errors.append(r)
        if errors:
            raise RuntimeError("workers failed to start: %s" % errors[:3])
        start.set()
        time.sleep(min(1.0, seconds / 2))
        during = gpu_mem_mib()
        mapped = ""
        if impl == "opd":  # what the daemon itself holds for the workers
            with opd.connect(sock) as c:
                mapped = " opd_bytes_mapped_mib=%.0f" % (
                    c.stats()["bytes_mapped"] / 2**20)
        res = [results.get(timeout=seconds + 60) for _ in procs]
        bad = [r for r in res if r[0] != "ok"]
        if bad:
            raise RuntimeError("workers failed: %s" % bad[:3])
        ops = sum(r[2] / r[3] for r in res)
        mem = "gpu_mem_mib=%.0f gpu_mem_total_mib=%.0f" % (
            during - before, during) if during is not None and before is not None \
            else "gpu_mem_mib=na"
        out("bench=workers%d impl=%s%s op=softmax shape=%dx%d seconds=%g "
            "ops_per_s=%.0f per_worker_ops_per_s=%.0f %s%s"
            % (n, label, " gpus=%d" % gpus if gpus > 1 else "", ROWS, COLS,
               seconds, ops, ops / n, mem, mapped))
        return ops
    finally:
        for p in procs:
            p.join(10)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)


def start_mps():
    """Starts an MPS control daemon with private directories; returns its
    env or None (and prints why) if it does not start."""
    exe = shutil.which("nvidia-cuda-mps-control")
    if exe is None:
        out("bench=mps status=absent")
        return None
    d = tempfile.mkdtemp(prefix="opd-mps.")
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=os.path.join(d, "pipe"),
               CUDA_MPS_LOG_DIRECTORY=os.path.join(d, "log"))
    os.makedirs(env["CUDA_MPS_PIPE_DIRECTORY"])
    os.makedirs(env["CUDA_MPS_LOG_DIRECTORY"])
    r = subprocess.run([exe, "-d"], env=env, capture_output=True, text=True,
                       timeout=30)
    if r.returncode != 0:
        out("bench=mps status=failed rc=%d msg=%r" % (r.returncode,
                                                     (r.stderr or r.stdout)[:200]))
        return None
    time.sleep(0.5)
    return env


def stop_mps(env):
    try:
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", env=env,
                       capture_output=True, text=True, timeout=30)
    except Exception as e:
        err("mps-stop", e)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket", default=os.environ.get("OPD_SOCKET"))
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--skip", default="", help="comma list: tiny,workers16,mps")
    ap.add_argument("--gpus", type=int, default=1,
                    help="also spread the workers over this many GPUs (the "
                    "daemon's cuda:0..N-1; worker i on i %% N) and print the "
                    "ratio against one GPU (the target: >= 1.8 on two)")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    if args.socket:
        os.environ["OPD_SOCKET"] = args.socket
    try:
        with opd.connect(args.socket) as c:
            info = c.server_info()
            out("bench=info opd=%s lib=%s devices=%s" % (
                info.get("version"), opd.lib_path(),
                ",".join("%s:%s" % (d.get("device"), str(d.get("name")).replace(" ", "_"))
                         for d in info.get("devices") or []) or "none"))
            if not info.get("devices"):
                out("bench=info error='the daemon has no CUDA device'")
                return 1
    except Exception as e:
        err("connect", e)
        return 1
    if "tiny" not in skip:
        try:
            bench_tiny(args.socket, args.calls)
        except Exception as e:
            err("tiny", e)
    if "workers16" not in skip:
        one = {}
        for impl in ("opd", "torch"):
            try:
                one[impl] = run_workers(impl, impl, args.socket, args.workers,
                                        args.seconds)
            except Exception as e:
                err("workers%d impl=%s" % (args.workers, impl), e)
        if args.gpus > 1:
            have = len(info.get("devices") or [])
            if have < args.gpus:
                out("bench=info skipped='workers over %d GPUs: the daemon has %d'"
                    % (args.gpus, have))
            else:
                for impl in ("opd", "torch"):
                    try:
                        many = run_workers(impl, impl, args.socket, args.workers,
                                           args.seconds, args.gpus)
                        if one.get(impl):
                            out("bench=workers%d impl=%s gpus=%d ratio_vs_one_gpu=%.2f"
                                % (args.workers, impl, args.gpus, many / one[impl]))
                    except Exception as e:
                        err("workers%d impl=%s gpus=%d" % (args.workers, impl,
                                                           args.gpus), e)
        if "mps" not in skip and time.monotonic() - T0 < 170:
            env = None
            saved = {k: os.environ.get(k) for k in
                     ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")}
            try:
                env = start_mps()
                if env is not None:
                    os.environ.update({k: env[k] for k in saved})
                    run_workers("torch", "torch_mps", args.socket, args.workers,
                                args.seconds)
            except Exception as e:
                err("workers%d impl=torch_mps" % args.workers, e)
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
                if env is not None:
                    stop_mps(env)
    out("bench=done seconds=%.0f" % (time.monotonic() - T0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
