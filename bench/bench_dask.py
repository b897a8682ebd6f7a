"""bench_dask.py: opd under Dask on one node: the published weights'
footprint and the batch inference's throughput against numpy in each
worker.

DESIGN
For each worker count W (--workers, default 1,2,4) it starts one daemon
and a LocalCluster of W single-thread worker processes pinned to it
(examples/dask/batch.py's emulated_cluster with one node), makes the
events (--rows of 256 floats in --block row blocks) and keeps them in the
workers' memory (persist), then:
  memory: the daemon's STATS before and after publishing the MLP's
    weights (opd.dask.publish: one copy per node) and after every worker
    ran a batch with them: published names, bytes_mapped; "weights copies"
    is the growth of bytes_mapped at publish over one copy's arena, and
    how much it grew from the workers' runs (their input/output arenas,
    never the weights: attachments map nothing new). The workers' RSS is
    printed for both jobs.
  throughput: the batch through opd (examples/dask/batch.py infer_block
    under opd.dask.map_blocks, new keys each run so Dask computes them
    again) and the same Dask job with numpy and the weights sent to
    every worker once, before the timing (run_numpy), best of --repeat after one warm-up each;
    the ratio opd/numpy in rows per second.
Dask's nannies give each worker OMP/OPENBLAS_NUM_THREADS=1; the daemon
gets --daemon-threads kernel threads (default: the CPUs).

--device cuda (a GPU node): the weights published once in the daemon's
device memory and the blocks run there, against torch on the GPU in each
worker (its own CUDA context and weights); rows per second and the GPU
memory of each side (nvidia-smi: the daemon's process against the sum of
the workers').

    /usr/bin/python3 bench/bench_dask.py [--workers 1,2,4] [--rows 32000]
        [--block 1000] [--repeat 3] [--daemon-threads N] [--device cpu|cuda]
"""
import argparse
import os
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples", "dask"))

import batch  # noqa: E402  (sets the paths and OPD_BIN / OPD_LIB)
import mlp  # noqa: E402
import numpy as np  # noqa: E402
import opd.dask as od  # noqa: E402


def rss():
    import psutil
    return psutil.Process().memory_info().rss


def best(fn, repeat):
    fn()                                  # warm-up: graphs defined, caches
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        y = fn()
        ts.append(time.perf_counter() - t)
    return min(ts), y


def gpu_mib(pids):
    """GPU memory nvidia-smi shows for these processes (MiB), and the
    card's memory.used."""
    import subprocess
    q = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                        "--format=csv,noheader,nounits"], capture_output=True,
                       text=True).stdout
    used = {int(a): float(b) for a, b in (l.split(",") for l in q.splitlines() if "," in l)}
    card = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                           "--format=csv,noheader,nounits"], capture_output=True,
                          text=True).stdout.split()
    return sum(used.get(p, 0.0) for p in pids), float(card[0]) if card else 0.0


def one_cuda(workers, rows, block, repeat, threads):
    """On a GPU node: the batch through the daemon's GPU (weights
    published once in device memory, blocks copied there by map_blocks)
    against torch on the GPU in every worker (its own context and weights)."""
    from opd import _daskd
    with batch.emulated_cluster(1, workers, threads) as (client, socks):
        x = batch.events(rows, block).persist()
        ev = x.compute()
        p = od.publish(client, "bench-mlp", mlp.pack(mlp.weights(batch.SEED)),
                       device="cuda")
        def run():
            return od.map_blocks(batch.infer_block, x, w=p, name=uuid.uuid4().hex,
                                 device="cuda", chunks=(x.chunks[0], (mlp.OUT,))).compute()
        t_opd, got = best(run, repeat)
        dpid = _daskd.process_of(socks["node0"]).pid
        mem_opd, card_opd = gpu_mib([dpid])
        [w] = client.scatter([mlp.weights(batch.SEED)], broadcast=True)
        t_t, ref = best(lambda: batch.run_torch(client, x, w), repeat)
        wpids = list(client.run(os.getpid).values())
        mem_t, card_t = gpu_mib(wpids)
        err = mlp.error(got, mlp.reference(mlp.weights(batch.SEED), ev))
        od.unpublish(client, p.name)
    return dict(workers=workers, opd=rows / t_opd, torch=rows / t_t, err=err,
                mem_opd=mem_opd, mem_torch=mem_t, card_opd=card_opd, card_torch=card_t)


def main_cuda(a):
    print("bench_dask --device cuda: MLP 256-512-512-1 float32, %d rows in "
          "blocks of %d, one node, best of %d; GPU MiB from nvidia-smi (opd: "
          "the daemon's process; torch: the sum of the workers')" % (a.rows, a.block, a.repeat))
    print("%7s %11s %13s %7s %9s %11s %8s %6s" % (
        "workers", "opd rows/s", "torch rows/s", "ratio", "GPU opd", "GPU torch",
        "mem ratio", "error"))
    ok = True
    for w in [int(v) for v in a.workers.split(",")]:
        r = one_cuda(w, a.rows, a.block, a.repeat, a.daemon_threads)
        print("%7d %11.0f %13.0f %6.2fx %8.0fM %10.0fM %8.2f %6.3f" % (
            w, r["opd"], r["torch"], r["opd"] / r["torch"], r["mem_opd"],
            r["mem_torch"], r["mem_opd"] / max(r["mem_torch"], 1), r["err"]))
        ok = ok and r["err"] <= 1
    print("bench_dask: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def one(workers, rows, block, repeat, threads):
    with batch.emulated_cluster(1, workers, threads) as (client, socks):
        x = batch.events(rows, block).persist()
        ev = x.compute()
        od.map_blocks("relu", x).compute()      # each worker's arenas made
        s0 = od.stats(client)["node0"]
        p = od.publish(client, "bench-mlp", mlp.pack(mlp.weights(batch.SEED)))
        s1 = od.stats(client)["node0"]
        def run():            # new keys each time: computed, not found
            return od.map_blocks(batch.infer_block, x, w=p, name=uuid.uuid4().hex,
                                 chunks=(x.chunks[0], (mlp.OUT,))).compute()
        t_opd, got = best(run, repeat)
        s2 = od.stats(client)["node0"]
        rss_opd = client.run(rss)
        [w] = client.scatter([mlp.weights(batch.SEED)], broadcast=True)
        t_np, ref = best(lambda: batch.run_numpy(client, x, w), repeat)
        rss_np = client.run(rss)
        err = mlp.error(got, mlp.reference(mlp.weights(batch.SEED), ev))
        gap = float(np.abs(got - ref).max())
        od.unpublish(client, p.name)
    one_copy = (mlp.layout()[1] + 4095) & ~4095
    return dict(workers=workers, published=s1["published"],
                copies=(s1["bytes_mapped"] - s0["bytes_mapped"]) / one_copy,
                weights_mb=one_copy / 2**20,
                runs_mb=(s2["bytes_mapped"] - s1["bytes_mapped"]) / 2**20,
                rss_opd=np.mean(list(rss_opd.values())) / 2**20,
                rss_np=np.mean(list(rss_np.values())) / 2**20,
                opd=rows / t_opd, np=rows / t_np, err=err, gap=gap)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--rows", type=int, default=32000)
    ap.add_argument("--block", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--daemon-threads", type=int, default=os.cpu_count())
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    a = ap.parse_args()
    if a.device == "cuda":
        return main_cuda(a)
    print("bench_dask: MLP 256-512-512-1 float32, %d rows in blocks of %d, "
          "one node, daemon --threads %d, best of %d"
          % (a.rows, a.block, a.daemon_threads, a.repeat))
    print("%7s %9s %14s %10s %9s %9s %11s %11s %7s %6s" % (
        "workers", "published", "weights copies", "runs MiB", "RSS opd",
        "RSS numpy", "opd rows/s", "numpy rows/s", "ratio", "error"))
    ok = True
    for w in [int(v) for v in a.workers.split(",")]:
        r = one(w, a.rows, a.block, a.repeat, a.daemon_threads)
        print("%7d %9d %14.2f %10.1f %8.0fM %8.0fM %11.0f %11.0f %6.2fx %6.3f" % (
            r["workers"], r["published"], r["copies"], r["runs_mb"],
            r["rss_opd"], r["rss_np"], r["opd"], r["np"], r["opd"] / r["np"],
            r["err"]))
        ok = ok and r["err"] <= 1 and r["published"] == 1 and \
            abs(r["copies"] - 1) < 1e-9
    print("weights: %.2f MiB a copy (one arena); error <= 1: opd matched the "
          "float64 reference" % (((mlp.layout()[1] + 4095) & ~4095) / 2**20))
    print("bench_dask: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
