"""examples/hft_server end to end: run.sh with few requests (a daemon of its
own, the publisher, 2 C and 2 Python clients at once) prints one table row
per client, each matched its reference, and everything stops cleanly; the
programs refuse bad options and a name nobody published, naming what was
wrong. (The latencies are the example's to print; here only that it works.)
"""
import os
import re
import subprocess
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("OPD_BUILD") or os.path.join(REPO, "build")
HFT = os.path.join(REPO, "examples", "hft_server")
sys.path.insert(0, HFT)
import mlp  # noqa: E402  (the example's model)
import opd  # noqa: E402

# the Python clients need the package's graph builder (Client.graph)
PY_CLIENTS = 2 if hasattr(opd.Client, "graph") else 0


def run(*cmd, timeout=300, env=None):
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


def test_hft_server_run_sh_serves_four_clients():
    r = run("bash", os.path.join(HFT, "run.sh"), BUILD, "--requests", "300",
            "--py-clients", str(PY_CLIENTS))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [ln.split() for ln in r.stdout.splitlines() if re.match(r"c\d+ ", ln)]
    assert [row[:2] for row in rows] == [["c1", "c"], ["c2", "c"], ["c3", "python"],
                                         ["c4", "python"]][:2 + PY_CLIENTS], r.stdout
    for row in rows:
        name, lang, path, device, requests, p50, p99, p999, checked, result = row
        assert path in ("linear", "matmul+add+relu") and device == "cpu", row
        assert requests == "300" and result == "ok", row
        assert 0 < float(p50) <= float(p99) <= float(p999), row
        assert int(checked) >= 300 // 64, row   # every 64th, the first and the last
    assert "published hft_mlp" in r.stdout and "unpublished hft_mlp (ok)" in r.stdout
    assert r.stdout.rstrip().endswith("opd stopped cleanly"), r.stdout


def test_hft_server_refusals(sock):
    r = run("bash", os.path.join(HFT, "run.sh"), BUILD, "--bogus", "1")
    assert r.returncode == 2 and "usage: run.sh" in r.stderr, r.stderr
    client = os.path.join(BUILD, "examples", "hft_server", "client")
    r = run(client, "--socket", sock, "--requests", "0")
    assert r.returncode == 2 and "--requests must be a positive integer, not 0" in r.stderr
    r = run(client, "--socket", sock, "--name", "no_such_model")
    assert r.returncode == 1 and "client c1: attach:" in r.stderr, r.stderr
    pub = os.path.join(BUILD, "examples", "hft_server", "publisher")
    r = run(pub, "--socket", sock, "--seed", "x")
    assert r.returncode == 2 and "--seed must be 0..16777215, not x" in r.stderr, r.stderr
    env = {"PYTHONPATH": os.path.join(REPO, "python")}
    r = run(sys.executable, os.path.join(HFT, "client.py"), "--socket", sock, "--name", "no_such_model",
            env=env)
    assert r.returncode != 0 and "no_such_model" in r.stderr + r.stdout, r.stderr


def test_hft_server_weights_are_the_same_in_c_and_python(sock):
    """The publisher's bytes (C, mlp.h) equal mlp.py's pack(weights(seed)):
    the Python clients' reference is the C publisher's model."""
    pub = subprocess.Popen([os.path.join(BUILD, "examples", "hft_server", "publisher"),
                            "--socket", sock, "--name", "hft_test_w", "--seed", "7"],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert pub.stdout.readline().startswith("publisher: published hft_test_w")
        with opd.connect(sock) as c:
            t = c.attach("hft_test_w")
            assert t.dtype == "float32" and t.nbytes == mlp.layout()[1]
            got = t.numpy()
        assert np.array_equal(got.view(np.uint32), mlp.pack(mlp.weights(7)).view(np.uint32))
    finally:
        pub.terminate()
        assert pub.wait(timeout=30) == 0
