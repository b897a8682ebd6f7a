"""The GPU machine's scripts without a GPU: bench/lib.sh (what bench/*.sh and
tests/gpu/*.sh share) run for real against a CPU daemon, and every one of
those scripts parsed by bash.

DESIGN
The scripts themselves need CUDA and MPS and run only on the GPU machine,
where a mistake costs a device call; what they share is checked here.
opd_up/opd_down start and stop the real daemon ($OPD_BIN) and ping it with
the real opctl next to it. mps_start/mps_stop talk to
nvidia-cuda-mps-control, which only the GPU machine has: a stand-in on PATH
records its arguments and its standard input instead, so the checks are of
what the helpers ask of it and of the environment they leave.
"""
import glob
import os
import stat
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.path.join(REPO, "bench", "lib.sh")
OPD_BIN = os.environ.get("OPD_BIN") or os.path.join(REPO, "build", "opd")
OPCTL = os.path.join(os.path.dirname(OPD_BIN), "opctl")
SCRIPTS = sorted(
    [os.path.join("bench", f) for f in os.listdir(os.path.join(REPO, "bench")) if f.endswith(".sh")] +
    [os.path.join("tests", "gpu", f) for f in os.listdir(os.path.join(REPO, "tests", "gpu"))
     if f.endswith(".sh")] +
    [os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "records", "*", "*.sh"))])


def bash(body, env=None, timeout=60):
    """body run by bash -u in the repository, after sourcing bench/lib.sh"""
    e = dict(os.environ, OPCTL=OPCTL)
    e.update(env or {})
    return subprocess.run(["bash", "-uc", '. "%s"\n%s' % (LIB, body), "gpu-test"],
                          cwd=REPO, capture_output=True, text=True, env=e, timeout=timeout)


@pytest.mark.parametrize("path", SCRIPTS)
def test_scripts_parse(path):
    r = subprocess.run(["bash", "-n", os.path.join(REPO, path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_gpu_scripts_use_the_helpers():
    """every script that starts MPS or waits for a daemon does it through
    lib.sh: no copy of the loops left to drift"""
    for path in SCRIPTS:
        if path == os.path.join("bench", "lib.sh"):
            continue
        text = open(os.path.join(REPO, path)).read()
        assert "nvidia-cuda-mps-control -d" not in text, path
        assert "ping -c 1 >/dev/null 2>&1 && break" not in text, path


def test_opd_up_and_down(tmp_path):
    if not os.access(OPD_BIN, os.X_OK):
        pytest.fail("no daemon at %s: build it with `make` or set OPD_BIN" % OPD_BIN)
    sock = str(tmp_path / "opd.sock")
    log = str(tmp_path / "opd.log")
    r = bash('opd_up "%s" "%s" "%s" --socket "%s" || exit 9\n'
             'kill -0 "$opd_pid" || exit 8\n'
             '"$OPCTL" --socket "%s" ping -c 1 >/dev/null || exit 7\n'
             'opd_down; echo "down=$?"\n'
             '[ -z "$opd_pid" ] || exit 6\n'
             '[ -S "%s" ] && exit 5\n'
             'opd_down; echo "again=$?"' % (sock, log, OPD_BIN, sock, sock, sock))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "down=0" in r.stdout and "again=0" in r.stdout, r.stdout


def test_opd_up_reports_a_daemon_that_exits(tmp_path):
    sock = str(tmp_path / "opd.sock")
    log = str(tmp_path / "opd.log")
    r = bash('opd_up "%s" "%s" "%s" --socket "%s" --no-such-option; echo "up=$?"\n'
             '[ -z "$opd_pid" ] && echo cleared' % (sock, log, OPD_BIN, sock))
    assert "up=1" in r.stdout and "cleared" in r.stdout, r.stdout + r.stderr
    assert "opd exited before answering on %s" % sock in r.stdout, r.stdout
    # the daemon's own words about what was wrong come with it
    assert "no-such-option" in r.stdout, r.stdout


def test_opd_up_gives_up_on_a_silent_daemon(tmp_path):
    """a process that never answers is killed after OPD_UP_S and said so"""
    sock = str(tmp_path / "opd.sock")
    log = str(tmp_path / "opd.log")
    r = bash('opd_up "%s" "%s" sleep 30; echo "up=$?"' % (sock, log),
             env={"OPD_UP_S": "1"}, timeout=20)
    assert "up=1" in r.stdout, r.stdout + r.stderr
    assert "did not answer on %s within 1 s: sleep 30" % sock in r.stdout, r.stdout


@pytest.fixture
def fake_mps(tmp_path):
    """nvidia-cuda-mps-control on PATH that records how it was called"""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    tool = bindir / "nvidia-cuda-mps-control"
    tool.write_text('#!/bin/sh\n'
                    'if [ "${1:-}" = -d ]; then\n'
                    '  [ -n "${FAIL_MPS:-}" ] && exit 1\n'
                    '  echo "start pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY" >>"%s"\n'
                    'else\n'
                    '  echo "command $(cat) pipe=$CUDA_MPS_PIPE_DIRECTORY" >>"%s"\n'
                    'fi\n' % (calls, calls))
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return {"PATH": "%s:%s" % (bindir, os.environ["PATH"])}, calls


def test_mps_start_and_stop(tmp_path, fake_mps):
    env, calls = fake_mps
    out = tmp_path / "out"
    r = bash('mps_start "%s" || exit 9\n'
             'echo "pipe=$CUDA_MPS_PIPE_DIRECTORY"\n'
             '[ -d "$CUDA_MPS_PIPE_DIRECTORY" ] && [ -d "$CUDA_MPS_LOG_DIRECTORY" ] || exit 8\n'
             'sh -c \'echo "child=$CUDA_MPS_PIPE_DIRECTORY"\'\n'
             'mps_stop\n'
             'echo "after=${CUDA_MPS_PIPE_DIRECTORY:-unset}"\n'
             'mps_stop; echo "again=$?"' % out, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    pipe = "%s/mps-pipe" % out
    # exported: the processes started after it are the control daemon's clients
    assert "child=%s" % pipe in r.stdout, r.stdout
    assert "after=unset" in r.stdout and "again=0" in r.stdout, r.stdout
    assert calls.read_text().splitlines() == [
        "start pipe=%s log=%s/mps-log" % (pipe, out),
        "command quit pipe=%s" % pipe], calls.read_text()
    # the pipes go, the control daemon's logs stay for the record
    assert not os.path.exists(pipe) and os.path.isdir("%s/mps-log" % out)


def test_mps_start_says_when_it_cannot(tmp_path, fake_mps):
    env, calls = fake_mps
    env = dict(env, FAIL_MPS="1")
    r = bash('mps_start "%s"; echo "st=$?"' % (tmp_path / "out"), env=env)
    assert "st=1" in r.stdout, r.stdout + r.stderr
    assert "no MPS control daemon" in r.stdout, r.stdout


def test_opd_deps():
    r = bash("opd_deps")
    if os.path.exists("/usr/include/uv.h"):
        assert r.stdout == "", r.stdout
    else:
        assert r.stdout.strip() == "DEPS=%s/.deps/gpu" % REPO, r.stdout


def test_need_built(tmp_path):
    there = tmp_path / "there"
    there.write_text("")
    r = bash('need_built "%s" && echo all\nneed_built "%s" "%s/gone" || echo "st=$?"'
             % (there, there, tmp_path))
    assert "all" in r.stdout and "st=1" in r.stdout, r.stdout + r.stderr
    assert "gpu-test: %s/gone missing (a CUDA build first)" % tmp_path in r.stdout, r.stdout
