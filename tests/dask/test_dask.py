"""opd under Dask against real daemons: plugins, publish once per node,
map_blocks, and the faults (a daemon killed mid-job, a worker killed, a
publish while a node is down). Fixtures: conftest.py (two emulated nodes,
one LocalCluster of 4 worker processes). Task functions live here: the
workers import this module (conftest puts this directory on their path).
"""
import os
import time

import numpy as np
import pytest

import opd
import opd.dask as od
from opd import _daskd

dask_array = pytest.importorskip("dask.array")


def slow_matmul(c, x, w):
    """A block that takes a while (so a daemon can die mid-job)."""
    time.sleep(0.05)
    return c.matmul(x, w)


def matmul_w(c, x, w):
    return c.matmul(x, w)


def pid():
    return os.getpid()


def held(dask_worker=None):
    """What this worker holds on its daemon: (node, published names kept,
    bytes of its allocator's arenas)."""
    n = od.node(dask_worker)
    c = n.client()
    t = c.empty((256, 1024), "float32")          # 1 MiB of shared memory
    n.cache["held"] = t
    return n.node, sorted(n.kept), c.memory_stats()["bytes_mapped"]


def attached(name):
    return od.attach(name).numpy()


def on_each_worker(client, fn, *args):
    """{worker: fn(*args)} run as a task on every worker (tasks, unlike
    client.run, may talk to the scheduler synchronously)."""
    ws = sorted(client.scheduler_info()["workers"])
    fs = [client.submit(fn, *args, workers=[w], pure=False) for w in ws]
    return dict(zip(ws, client.gather(fs)))


def daemon_stats(sock):
    with opd.connect(sock) as c:
        return c.stats()


def test_workers_pinned_to_their_node(client, nodes):
    where = od.nodes(client)
    assert len(where) == 4
    by_node = {}
    for addr, (node, sock) in where.items():
        assert sock == nodes.sockets[node]
        by_node.setdefault(node, []).append(addr)
    assert sorted(len(v) for v in by_node.values()) == [2, 2]


def test_no_daemon_names_the_node(client, nodes, tmp_path):
    missing = str(tmp_path / "none.sock")
    with pytest.raises(od.NodeError) as e:
        od.add_plugin(client,
                      od.OpdWorker(socket={"node0": nodes.sockets["node0"],
                                           "lonely": missing}), name=od.NAME)
    assert "node lonely" in str(e.value) and missing in str(e.value)
    od.register(client, socket=nodes.sockets)       # as before
    assert len(od.nodes(client)) == 4


def test_publish_once_per_node(client, nodes):
    w = np.arange(64 * 32, dtype=np.float32).reshape(64, 32) / 100
    before = {n: daemon_stats(s)["published"] for n, s in nodes.sockets.items()}
    p = od.publish(client, "pw", w)
    assert p.version == 1 and sorted(p.keepers) == ["node0", "node1"]
    after = {n: daemon_stats(s)["published"] for n, s in nodes.sockets.items()}
    assert all(after[n] == before[n] + 1 for n in after)    # one copy a node
    got = on_each_worker(client, attached, "pw")
    assert len(got) == 4
    for v in got.values():
        assert np.array_equal(v, w)
    p2 = od.publish(client, "pw", 2 * w)                    # a new version
    assert p2.version == 2 and p2.vname == "pw@v2"
    after2 = {n: daemon_stats(s)["published"] for n, s in nodes.sockets.items()}
    assert after2 == after                                  # v1 withdrawn
    got = on_each_worker(client, attached, "pw")
    assert all(np.array_equal(v, 2 * w) for v in got.values())
    assert od.unpublish(client, "pw") == {"node0": True, "node1": True}
    gone = {n: daemon_stats(s)["published"] for n, s in nodes.sockets.items()}
    assert gone == before
    with pytest.raises(KeyError):
        od.unpublish(client, "pw")
    with pytest.raises(opd.BadArgumentError):
        od.publish(client, "a/b", w)


def test_map_blocks_op_and_function(client):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    x = dask_array.from_array(rng.standard_normal((100, 16)).astype(np.float32),
                              chunks=(25, 16))
    p = od.publish(client, "mw", w)
    y = od.map_blocks("matmul", x, p, chunks=(25, 8))
    assert y.shape == (100, 8)
    ref = x.compute().astype(np.float64) @ w
    assert np.abs(y.compute() - ref).max() < 1e-4
    r = od.map_blocks("relu", x - 0.25).compute()
    assert np.array_equal(r, np.maximum(x.compute() - np.float32(0.25), 0))
    z = od.map_blocks(slow_matmul, x, w=p, chunks=(25, 8)).compute()
    assert np.abs(z - ref).max() < 1e-4
    od.unpublish(client, "mw")
    # a copy made on a named device (the host here: device="cuda" on a GPU
    # node goes the same way, c.from_numpy(array, device=...))
    pd_ = od.publish(client, "mwd", w, device="cpu")
    y = od.map_blocks("matmul", x, pd_, chunks=(25, 8), device="cpu")
    assert np.abs(y.compute() - ref).max() < 1e-4
    od.unpublish(client, "mwd")


def test_map_partitions_numeric_columns(client):
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    rng = np.random.default_rng(3)
    pdf = pd.DataFrame({"a": rng.standard_normal(50), "b": np.arange(50) - 25,
                        "tag": ["x"] * 50, "c": rng.standard_normal(50)},
                       index=np.arange(100, 150))
    df = dd.from_pandas(pdf, npartitions=4)
    r = od.map_partitions("relu", df).compute()        # the numeric columns
    assert list(r.columns) == ["a", "b", "c"] and r.index.equals(pdf.index)
    want = np.maximum(pdf[["a", "b", "c"]].to_numpy(np.float32), 0)
    assert np.array_equal(r.to_numpy(), want)
    w = rng.standard_normal((2, 2)).astype(np.float32)
    p = od.publish(client, "dfw", w)
    y = od.map_partitions(matmul_w, df, columns=["a", "c"], out_columns=["y0", "y1"],
                          w=p).compute()
    ref = pdf[["a", "c"]].to_numpy(np.float64) @ w
    assert np.abs(y.to_numpy() - ref).max() < 1e-4
    with pytest.raises(ValueError, match="out_columns"):
        od.map_partitions("relu", df, out_columns=["only"]).compute()
    od.unpublish(client, "dfw")


def test_resources_annotate_the_tasks():
    x = dask_array.ones((8, 4), chunks=(4, 4), dtype=np.float32)
    y = od.map_blocks("relu", x, resources={"GPU": 1}, device="cuda")
    layers = [l for l in y.__dask_graph__().layers.values()
              if (l.annotations or {}).get("resources") == {"GPU": 1}]
    assert len(layers) == 1


def test_example_batch_inference(client, nodes):
    import batch
    import mlp
    x = batch.events(3000, 500)
    p, y = batch.run_opd(client, x, name="mlp-test")
    assert y.shape == (3000, 1)
    ev = x.compute()
    assert np.array_equal(ev[700], mlp.events(7, 700, 1)[0])
    assert mlp.error(y, mlp.reference(mlp.weights(batch.SEED), ev)) <= 1
    for n, s in nodes.sockets.items():          # one copy on each node
        st = daemon_stats(s)
        assert st["published"] == 1, (n, st)
    assert np.abs(batch.run_numpy(client, x) - y).max() < 1e-3
    od.unpublish(client, p.name)


def test_daemon_killed_mid_job_then_retry(client, nodes):
    from distributed import wait
    rng = np.random.default_rng(2)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    xs = rng.standard_normal((40 * 8, 16)).astype(np.float32)
    p = od.publish(client, "kw", w)
    # the input persisted: its blocks stay in the workers' memory while
    # failed tasks wait for their retry (current distributed forgets the
    # keys of an unpersisted input once its dependents erred)
    xa = client.persist(dask_array.from_array(xs, chunks=(8, 16)))
    y = od.map_blocks(slow_matmul, xa, w=p, chunks=(8, 8))
    futs = client.compute(list(y.to_delayed().ravel()))
    deadline = time.monotonic() + 30
    while not any(f.done() for f in futs) and time.monotonic() < deadline:
        time.sleep(0.01)
    nodes.kill("node0")                 # node0's daemon crashes mid-job
    wait(futs, timeout=60)
    errs = [f.exception() for f in futs if f.status == "error"]
    assert errs, "no task failed although node0's daemon died"
    for e in errs:
        assert isinstance(e, od.NodeError), repr(e)
        assert e.node == "node0" and "node node0" in str(e)
    nodes.start("node0")                # back: its keeper publishes again
    assert sum(od.restore(client).values()) >= 2
    client.retry(futs)
    got = np.concatenate(client.gather(futs))
    assert np.abs(got - xs.astype(np.float64) @ w).max() < 1e-4
    od.unpublish(client, "kw")


def test_publish_while_a_node_is_down(client, nodes):
    w = np.ones((32, 32), np.float32)
    base = daemon_stats(nodes.sockets["node0"])["published"]
    assert nodes.stop("node1") == 0
    try:
        with pytest.raises(od.PublishError) as e:
            od.publish(client, "dw", w)
        assert set(e.value.failed) == {"node1"}
        assert "node1" in str(e.value) and "1 of 2 node" in str(e.value)
        # the copy node0 took was withdrawn: no node silently differs
        assert daemon_stats(nodes.sockets["node0"])["published"] == base
        with pytest.raises(KeyError):
            od.current(client, "dw")
    finally:
        nodes.start("node1")
    p = od.publish(client, "dw", w)      # the node is back: everywhere
    assert p.version == 2 and sorted(p.keepers) == ["node0", "node1"]
    od.unpublish(client, "dw")


def test_worker_killed_daemon_reclaims(client, nodes):
    p = od.publish(client, "hw", np.ones((512, 512), np.float32))  # 1 MiB
    addr = p.keepers["node1"]
    node, kept, nbytes = client.run(held, workers=[addr])[addr]
    assert node == "node1" and "hw@v1" in kept and nbytes >= 1 << 20
    sock = nodes.sockets["node1"]
    s0 = daemon_stats(sock)
    wpid = client.run(pid, workers=[addr])[addr]
    os.kill(wpid, 9)                    # the keeper dies (its nanny restarts one)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        s1 = daemon_stats(sock)
        if s1["published"] == s0["published"] - 1 and \
           s1["bytes_mapped"] <= s0["bytes_mapped"] - nbytes - (1 << 20):
            break
        time.sleep(0.1)
    assert s1["published"] == s0["published"] - 1, (s0, s1)
    assert s1["bytes_mapped"] <= s0["bytes_mapped"] - nbytes - (1 << 20), (s0, s1)
    client.wait_for_workers(4, timeout=60)


def test_nanny_plugin_starts_and_stops_a_daemon(client, tmp_path):
    sock = str(tmp_path / "nanny.sock")
    od.start_daemons(client, socket=sock, args=("--threads", "1"))
    assert _daskd.answers(sock)
    proc = _daskd.process_of(sock)
    assert proc is not None and proc.poll() is None
    with opd.connect(sock) as c:
        assert c.stats()["healthy"]
    od.stop_daemons(client)
    assert proc.wait(20) == 0 and not _daskd.answers(sock)


def test_preload_modules_start_daemon_and_connect(tmp_path, monkeypatch):
    """`--preload-nanny opd.dask --preload opd.dask` with OPD_SOCKET: the
    nannies start the node's daemon, the workers connect to it, and the
    daemon stops (exit 0) with the cluster."""
    from distributed import Client, LocalCluster
    sock = str(tmp_path / "preload.sock")
    monkeypatch.setenv("OPD_SOCKET", sock)
    monkeypatch.setenv("OPD_DASK_NODE", "solo")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, preload_nanny=["opd.dask"],
                      preload=["opd.dask"]) as cl, Client(cl) as c:
        proc = _daskd.process_of(sock)
        assert proc is not None and proc.poll() is None
        assert sorted(od.nodes(c).values()) == [("solo", sock)] * 2
        p = od.publish(c, "pre", np.arange(6, dtype=np.float32))
        with opd.connect(sock) as oc:
            assert oc.stats()["published"] == 1
        x = dask_array.from_array(np.arange(12, dtype=np.float32) - 6, chunks=4)
        assert np.array_equal(od.map_blocks("relu", x).compute(),
                              np.maximum(np.arange(12, dtype=np.float32) - 6, 0))
        od.unpublish(c, p.name)
    assert proc.wait(20) == 0 and not _daskd.answers(sock)
