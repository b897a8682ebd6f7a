"""pytest set-up for opd under Dask (tests/dask): two emulated nodes.

DESIGN
Two opd daemons ($OPD_BIN, default build/opd) on two sockets of a temp
dir are the two nodes, started and stopped with opd._daskd (the module
OpdDaemon uses), so a test can kill one (its Popen) and start it again.
One LocalCluster per session (processes=True, 4 single-thread workers)
with OpdWorker pinning worker i to node i mod 2. Worker processes import
this checkout's python/opd and this directory's modules through the
PYTHONPATH set here before they start (examples/dask and
examples/hft_server too, for the example's test).
"""
import os
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PY = os.path.join(REPO, "python")
sys.path.insert(0, PY)
EXAMPLES = [os.path.join(REPO, "examples", "dask"),
            os.path.join(REPO, "examples", "hft_server")]
sys.path[1:1] = EXAMPLES
os.environ["PYTHONPATH"] = os.pathsep.join(
    [PY, HERE] + EXAMPLES + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
os.environ.setdefault("OPD_BIN", os.path.join(REPO, "build", "opd"))
os.environ.setdefault("OPD_LIB", os.path.join(REPO, "build", "libopd.so"))

distributed = pytest.importorskip("distributed")

from opd import _daskd  # noqa: E402
import opd.dask as od  # noqa: E402

DAEMON_ARGS = ("--threads", "1")
WORKERS = 4


class Nodes:
    """The two emulated nodes: .sockets {node: path}; kill(), start()."""

    def __init__(self, directory):
        self.sockets = {"node0": os.path.join(directory, "n0.sock"),
                        "node1": os.path.join(directory, "n1.sock")}
        for n in self.sockets:
            self.start(n)

    def start(self, node):
        _daskd.start(self.sockets[node], args=DAEMON_ARGS, node=node)

    def kill(self, node):
        """SIGKILL the node's daemon (a crash); returns its exit status."""
        p = _daskd.process_of(self.sockets[node])
        p.kill()
        p.wait()
        return _daskd.stop(self.sockets[node])

    def stop(self, node):
        """SIGTERM the node's daemon; returns its exit code."""
        return _daskd.stop(self.sockets[node])


@pytest.fixture(scope="session")
def nodes():
    with tempfile.TemporaryDirectory(prefix="opd-dask.") as d:
        ns = Nodes(d)
        try:
            yield ns
        finally:
            for n in ns.sockets:
                if _daskd.process_of(ns.sockets[n]) is not None:
                    assert ns.stop(n) == 0, "%s's daemon did not exit 0" % n


@pytest.fixture(scope="session")
def cluster(nodes):
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=WORKERS, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cl, Client(cl) as c:
        od.register(c, socket=nodes.sockets)
        yield c


@pytest.fixture
def client(cluster, nodes):
    """The session's dask Client, with all workers up and registered."""
    cluster.wait_for_workers(WORKERS, timeout=60)
    return cluster
