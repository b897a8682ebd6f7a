"""bench/bench_cpu_torch.py against the test daemon: every case runs, checks
opd's result against torch's and prints its line; bad options are refused.
(The figures are the benchmark's business, bench/results; here only that
it works.)"""
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "bench", "bench_cpu_torch.py")


def run(sock, *args):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    return subprocess.run([sys.executable, SCRIPT, "--socket", sock, *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_every_small_case_runs_and_matches_torch(sock):
    r = run(sock, "--reps", "3", "--sizes", "small", "--threads", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("cpu ")]
    ops = [re.search(r"op=(\S+)", l).group(1) for l in lines]
    assert ops == ["relu", "add", "gelu", "gelu_tanh", "softmax", "layernorm",
                   "matmul", "conv2d"], r.stdout
    assert "numpy_us=" in lines[6] and "ratio_numpy=" in lines[6], lines[6]
    for l in lines:
        kv = dict(re.findall(r"(\w+)=(\S+)", l))
        assert kv["check"] == "ok", l
        assert float(kv["opd_us"]) > 0 and float(kv["torch_us"]) > 0, l
        want = float(kv["opd_us"]) / float(kv["torch_us"])   # of the rounded figures
        assert abs(float(kv["ratio"]) - want) <= 0.05 * want + 0.01, l


def test_options_are_checked(sock):
    r = run(sock, "--sizes", "huge")
    assert r.returncode == 2 and "unknown huge" in r.stderr, r.stderr
    r = run(sock, "--ops", "relu,tanh")
    assert r.returncode == 2 and "unknown tanh" in r.stderr, r.stderr
    r = run(sock, "--reps", "0")
    assert r.returncode == 2 and "--reps must be at least 1" in r.stderr, r.stderr


def test_plot_draws_the_table_as_a_png(tmp_path):
    """bench/plot_cpu_torch.py: two sections, two runs of one: a PNG."""
    import pytest
    pytest.importorskip("matplotlib")
    src = tmp_path / "r.txt"
    src.write_text("# machine: test\n## 2 threads\n"
                   "cpu op=gelu shape=2048x2048 opd_us=9 torch_us=10 ratio=0.90 check=ok\n"
                   "cpu op=gelu shape=2048x2048 opd_us=11 torch_us=10 ratio=1.10 check=ok\n"
                   "cpu op=matmul shape=256x256 opd_us=5 torch_us=4 ratio=1.25 check=ok"
                   " numpy_us=5 ratio_numpy=1.00\n"
                   "## 1 thread\n"
                   "cpu op=softmax shape=2048x2048 opd_us=7 torch_us=10 ratio=0.70 check=ok\n")
    out = tmp_path / "r.png"
    r = subprocess.run([sys.executable, os.path.join(REPO, "bench", "plot_cpu_torch.py"),
                        str(src), str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_handoff_draws_the_pairs_as_a_png(tmp_path):
    """bench/plot_handoff.py: before/after pairs in both units: a PNG; a
    file with none of its lines: a clear refusal."""
    import pytest
    pytest.importorskip("matplotlib")
    src = tmp_path / "h.txt"
    src.write_text("# a header\n"
                   "handoff step=a case=matmul unit=us before=100,90 after=30,28 torch=4,6\n"
                   "handoff step=b case=mlp unit=ratio before=5.2,6.4 after=0.6,0.7 torch=1,1\n")
    out = tmp_path / "h.png"
    plot = os.path.join(REPO, "bench", "plot_handoff.py")
    r = subprocess.run([sys.executable, plot, str(src), str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    empty = tmp_path / "e.txt"
    empty.write_text("# nothing\n")
    r = subprocess.run([sys.executable, plot, str(empty)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0 and "no handoff lines" in r.stderr, r.stderr
