"""bench/bench_graph.py (and the C bench_graph it runs) against the test
daemon on the CPU: every case prints its line and matches the reference,
the ratio lines are those figures' ratios, --procs runs both sides, and
bad options are refused. (The figures are bench/results' business.)"""
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "bench", "bench_graph.py")
BUILD = os.environ.get("OPD_BUILD") or os.path.join(REPO, "build")
C_BENCH = os.path.join(BUILD, "bench", "bench_graph")

pytest.importorskip("torch")
sys.path.insert(0, os.path.join(REPO, "python"))
import opd  # noqa: E402

if not hasattr(opd.Client, "graph"):
    pytest.skip("this opd package has no Client.graph (the Python graph builder)",
                allow_module_level=True)


def run(sock, *args, timeout=600):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    return subprocess.run([sys.executable, SCRIPT, "--socket", sock, *args],
                          capture_output=True, text=True, env=env, timeout=timeout)


def kv(line):
    return dict(re.findall(r"(\w+)=(\S+)", line))


def test_every_case_runs_and_matches(sock):
    assert os.path.exists(C_BENCH), "make %s first" % C_BENCH
    r = run(sock, "--batch", "1,3", "-n", "40", "--c-bench", C_BENCH)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "# machine:" in r.stdout and "card: none (CPU backend)" in r.stdout
    graphs = [kv(ln) for ln in r.stdout.splitlines() if ln.startswith("graph ")]
    got = sorted((g["lang"], g["batch"], g["case"]) for g in graphs)
    want = sorted((lang, b, case) for b in ("1", "3") for lang, case in (
        ("c", "graph_prepared"), ("c", "graph_run"), ("c", "graph_rotate"),
        ("c", "ops_prepared"),
        ("python", "graph"), ("python", "ops"), ("torch", "eager")))
    assert got == want, r.stdout
    for g in graphs:
        assert g["check"] == "ok" and g["device"] == "cpu", g
        assert 0 < float(g["p50_us"]) <= float(g["p99_us"]) <= float(g["p999_us"]), g
    p50 = {(g["lang"], g["batch"], g["case"]): float(g["p50_us"]) for g in graphs}
    ratios = [kv(ln) for ln in r.stdout.splitlines() if ln.startswith("ratio ")]
    assert len(ratios) == 12, r.stdout      # 6 opd cases x 2 batches
    for q in ratios:
        assert q["vs"] == "torch_eager", q
        lang, case = q["case"].split("_", 1)
        want_ratio = p50[(lang, q["batch"], case)] / p50[("torch", q["batch"], "eager")]
        assert abs(float(q["p50_ratio"]) - want_ratio) <= 0.02 * want_ratio + 0.01, q


def test_procs_mode_runs_both_sides(sock):
    r = run(sock, "--procs", "2", "--seconds", "0.5", "--c-bench", C_BENCH)
    assert r.returncode == 0, r.stdout + r.stderr
    sides = [kv(ln) for ln in r.stdout.splitlines() if ln.startswith("procs side=")]
    assert [(s["side"], s["lang"]) for s in sides] == [("opd", "c"), ("opd", "python"),
                                                       ("torch", "python")], r.stdout
    for s in sides:
        assert s["check"] == "ok" and int(s["requests"]) > 0 and s["procs"] == "2", s
    ratio = [kv(ln) for ln in r.stdout.splitlines() if ln.startswith("procs ratio")]
    assert len(ratio) == 1 and float(ratio[0]["throughput_opd_over_torch"]) > 0, r.stdout
    assert float(ratio[0]["c_throughput_opd_over_torch"]) > 0, r.stdout


def test_options_are_checked(sock):
    r = run(sock, "--batch", "0")
    assert r.returncode == 2 and "--batch expects sizes 1..4096" in r.stderr, r.stderr
    r = run(sock, "--device", "tpu")
    assert r.returncode == 2 and "--device is cpu, cuda or cuda:N, not 'tpu'" in r.stderr
    r = run(sock, "-n", "3")
    assert r.returncode == 2 and "-n must be at least 10" in r.stderr, r.stderr
    r = subprocess.run([C_BENCH, "--socket", sock, "--batch", "2,x"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--batch expects sizes 1..4096" in r.stderr, r.stderr
    r = subprocess.run([C_BENCH, "--socket", sock, "--procs", "2", "--seconds", "-1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--seconds expects 0 < S <= 3600" in r.stderr, r.stderr
