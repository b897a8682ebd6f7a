"""bench/stamps.py (the summary of OPD_GPU_STAMPS files) on files written
here: its figures are the medians of the differences the docstring names,
runs missing a stamp are left out, and a directory without stamps is an
error that says why. The stamps themselves are written by the kernels on
the GPU machine (docs/async.md "Timestamps")."""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STAMPS = os.path.join(REPO, "bench", "stamps.py")


def run(*args):
    return subprocess.run([sys.executable, STAMPS, *args], capture_output=True,
                          text=True, timeout=60)


def test_summary_figures(tmp_path):
    lines = ["# req poll_start poll_seen wait_start word_seen flag_store"]
    t = 10_000_000
    for req in range(1, 101):
        # the daemon's wait 100 us early (0.2 of them late: lead 0.3 us), the word
        # seen 2 us before the poll kernel starts, op 3.5 us, back 1 us
        ws = t - 100_000 if req % 5 else t - 300
        seen = t
        ps = t + 2_000
        fs = seen + 3_500
        pseen = fs + 1_000
        lines.append("%d %d %d %d %d %d" % (req, ps, pseen, ws, seen, fs))
        t += 110_000
    lines.append("101 5 6 0 0 7")               # the wait's stamps missing: left out
    (tmp_path / "stamps-1-2-0.txt").write_text("\n".join(lines) + "\n")
    r = run(str(tmp_path))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "runs=100 " in out
    for want in ("lead=100.00", "there=-2.00", "op=3.50", "back=1.00", "poll=2.50",
                 "late=20%"):
        assert want in out, (want, out)


def test_few_runs_left_out(tmp_path):
    (tmp_path / "stamps-1-3-0.txt").write_text("1 1 2 1 1 1\n")
    r = run(str(tmp_path))
    assert r.returncode == 0 and "stamps-1-3-0" not in r.stdout
    assert "stamps-1-3-0" in run(str(tmp_path), "--min-runs", "1").stdout


def test_no_stamps(tmp_path):
    r = run(str(tmp_path))
    assert r.returncode == 1 and "no stamps-*.txt in" in r.stdout
