"""batch.py: batch inference of the hft_server MLP on a Dask cluster whose
nodes each run one opd daemon, with the weights published once per node.

DESIGN
Two nodes are emulated on one machine: two daemons on two sockets of a
temp dir (opd.dask.start_daemon), and a LocalCluster of worker processes
that opd.dask.OpdWorker pins to them (worker i to node i mod 2). The
weights (examples/hft_server/mlp.py, from a seed) are published once per
node (opd.dask.publish); the events are a dask array of (rows, 256)
blocks made on the workers; each block runs through its worker's node
daemon as one opd graph (mlp.define over the attached weights, defined
once per worker and block shape). The answer is checked against mlp's
float64 reference. The same pieces serve bench/bench_dask.py, which also
runs numpy_block (the same job with numpy and a copy of the weights in
every worker) for comparison. A numpy run's blocks get new keys (name=),
so Dask computes them again rather than finding the last run's in memory.

    /usr/bin/python3 examples/dask/batch.py [--workers 4] [--nodes 2]
        [--rows 20000] [--block 1000]     (after `make`; see docs/dask.md)
"""
import argparse
import contextlib
import os
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
HFT = os.path.join(REPO, "examples", "hft_server")
for p in (os.path.join(REPO, "python"), HFT, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)
# the worker processes import the same modules
os.environ["PYTHONPATH"] = os.pathsep.join(
    [os.path.join(REPO, "python"), HFT, HERE] +
    [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
os.environ.setdefault("OPD_BIN", os.path.join(REPO, "build", "opd"))
os.environ.setdefault("OPD_LIB", os.path.join(REPO, "build", "libopd.so"))

import numpy as np  # noqa: E402

import mlp  # noqa: E402
import opd.dask as od  # noqa: E402

SEED = 42


@contextlib.contextmanager
def emulated_cluster(nodes=2, workers=4, daemon_threads=1):
    """Yields (dask Client, {node: socket}): `nodes` daemons on sockets of
    a temp dir and a LocalCluster of `workers` single-thread worker
    processes pinned to them; stops everything after."""
    from distributed import Client, LocalCluster
    with tempfile.TemporaryDirectory(prefix="opd-dask-example.") as d:
        socks = {"node%d" % i: os.path.join(d, "node%d.sock" % i)
                 for i in range(nodes)}
        for n, s in socks.items():
            od.start_daemon(s, args=("--threads", str(daemon_threads)), node=n)
        try:
            with LocalCluster(n_workers=workers, threads_per_worker=1,
                              processes=True, dashboard_address=None) as cl, \
                    Client(cl) as client:
                od.register(client, socket=socks)
                yield client, socks
        finally:
            for s in socks.values():
                od.stop_daemon(s)


def events(rows, block):
    """The input: a dask array (rows, 256) of market events, each block
    made on its worker (mlp.events of stream 7)."""
    import dask.array as da
    starts = da.arange(0, rows, block, chunks=1)
    return da.map_blocks(lambda s: mlp.events(7, int(s[0]), min(block, rows - int(s[0]))),
                         starts, chunks=(tuple(min(block, rows - i) for i in range(0, rows, block)),
                                         (mlp.IN,)),
                         new_axis=1, dtype=np.float32)


def infer_block(c, x, w):
    """One block through the node's daemon: x (B, 256) an opd Tensor, w
    the attached packed weights, both on one device (host memory, or the
    daemon's GPU: publish and map_blocks with device="cuda"); the graph is
    defined once per worker (thread), block shape and device. Returns the (B, 1) output Tensor."""
    n, b, dev = od.node(), x.shape[0], x.device
    linear = n.cached("linear", lambda: mlp.has_linear(c))

    def define():
        return mlp.define(c, mlp.param_tensors(w, linear), b, linear, dev)
    g = n.cached(("mlp", b, dev), define)
    if linear:
        return g.run(x)
    return g.run(np.ascontiguousarray(x.numpy().T)).numpy().T  # (1, B) -> (B, 1)


def numpy_block(x, w):
    """The same block with numpy in the worker (w: its own weights)."""
    h = np.maximum(x @ w["w1"].T + w["b1"], 0)
    h = np.maximum(h @ w["w2"].T + w["b2"], 0)
    return h @ w["w3"].T + w["b3"]


_TORCH = {}


def torch_block(x, w, device="cuda"):
    """The same block with torch in the worker on `device`: the worker's
    own copy of the weights there (made by its first block), its own CUDA
    context: what each worker does without opd."""
    import torch
    import torch.nn.functional as F
    if device not in _TORCH:
        _TORCH[device] = {k: torch.from_numpy(v).to(device) for k, v in w.items()}
    p = _TORCH[device]
    with torch.no_grad():
        h = torch.from_numpy(x).to(device)
        h = F.relu(F.linear(h, p["w1"], p["b1"]))
        h = F.relu(F.linear(h, p["w2"], p["b2"]))
        return F.linear(h, p["w3"], p["b3"]).cpu().numpy()


def run_torch(client, x, w, device="cuda"):
    """The job with torch in each worker (w: the weights' future from
    client.scatter(..., broadcast=True))."""
    y = x.map_blocks(torch_block, w, device, chunks=(x.chunks[0], (mlp.OUT,)),
                     dtype=np.float32, name="torch-mlp-" + uuid.uuid4().hex)
    return y.compute()


def run_opd(client, x, name="mlp"):
    """Publishes the weights once per node and runs the batch; returns
    (Published, the (rows, 1) result)."""
    p = od.publish(client, name, mlp.pack(mlp.weights(SEED)))
    y = od.map_blocks(infer_block, x, w=p, chunks=(x.chunks[0], (mlp.OUT,)))
    return p, y.compute()


def run_numpy(client, x, w=None):
    """The same job with numpy: the weights in every worker (w: their
    future from client.scatter(..., broadcast=True); None: sent now)."""
    if w is None:
        [w] = client.scatter([mlp.weights(SEED)], broadcast=True, hash=False)
    y = x.map_blocks(numpy_block, w, chunks=(x.chunks[0], (mlp.OUT,)),
                     dtype=np.float32, name="numpy-mlp-" + uuid.uuid4().hex)
    return y.compute()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--block", type=int, default=1000)
    a = ap.parse_args()
    with emulated_cluster(a.nodes, a.workers) as (client, socks):
        for n, s in sorted(socks.items()):
            print("== %s: opd on %s" % (n, s))
        where = od.nodes(client)
        for addr, (n, _) in sorted(where.items(), key=lambda kv: kv[1]):
            print("   worker %s -> %s" % (addr, n))
        x = events(a.rows, a.block)
        t = time.perf_counter()
        p, y = run_opd(client, x)
        dt = time.perf_counter() - t
        print("== published %s once per node: %s" % (p.vname, ", ".join(
            "%s kept by %s" % kv for kv in sorted(p.keepers.items()))))
        for n, s in sorted(od.stats(client).items()):
            print("   %s: %d published name(s), %d sessions, %.1f MiB of arenas"
                  % (n, s["published"], s["sessions"], s["bytes_mapped"] / 2**20))
        err = mlp.error(y, mlp.reference(mlp.weights(SEED), x.compute()))
        print("== %d rows in blocks of %d: %.2f s (%.0f rows/s), error %.3f (<= 1: match)"
              % (a.rows, a.block, dt, a.rows / dt, err))
        od.unpublish(client, p.name)
        if err > 1:
            print("batch: MISMATCH")
            return 1
        print("batch: all rows matched the reference; daemons stopped cleanly")
    return 0


if __name__ == "__main__":
    sys.exit(main())
