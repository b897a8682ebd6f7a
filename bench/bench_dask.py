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

    /usr/bin/python3 bench/bench_dask.py [--workers 1,2,4] [--rows 32000]
        [--block 1000] [--repeat 3] [--daemon-threads N]
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
    a = ap.parse_args()
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
