"""pytest set-up for the opd Python package: a real daemon per session.

DESIGN
The suite tests python/opd of this checkout (put first on sys.path)
against the daemon $OPD_BIN (default build/opd), started once per session
on a socket in a temp dir and stopped with SIGTERM at the end, which must
exit 0. $OPD_SOCKET is set for the session, so children started with
spawn or forkserver find the daemon too. The `start_daemon` fixture starts
extra private daemons (start(*options)) for tests that stop theirs (closed
connections, shutdown) or need options of their own.
"""
import os
import signal
import socket as socketlib
import subprocess
import sys
import tempfile
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import opd  # noqa: E402

OPD_BIN = os.environ.get("OPD_BIN") or os.path.join(REPO, "build", "opd")


class Daemon:
    """A daemon process on a private socket; stop() returns its exit code."""

    def __init__(self, directory, args=(), preexec_fn=None):
        self.socket = os.path.join(directory, "opd.sock")
        self.log = os.path.join(directory, "opd.log")
        with open(self.log, "wb") as log:
            # the spin pass tests the spin transport, whatever the cores
            spin = ["--spin", "always"] if os.environ.get("OPD_WAIT") == "spin" else []
            self.proc = subprocess.Popen([OPD_BIN, "--socket", self.socket, *spin,
                                          *args], stdout=log, stderr=log,
                                         preexec_fn=preexec_fn)
        deadline = time.monotonic() + 30  # ready when it answers; the bound catches a hang
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("opd exited with %s: %s" % (self.proc.returncode,
                                                               self.read_log()))
            s = socketlib.socket(socketlib.AF_UNIX)
            try:
                s.connect(self.socket)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("opd did not start: " + self.read_log())
                time.sleep(0.02)
            finally:
                s.close()

    def read_log(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def stop(self, timeout=20):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)


@pytest.fixture(scope="session")
def daemon():
    if not os.access(OPD_BIN, os.X_OK):
        pytest.fail("no daemon at %s: build it with `make` or set OPD_BIN" % OPD_BIN)
    with tempfile.TemporaryDirectory(prefix="opd-pytest.") as d:
        dm = Daemon(d)
        old = os.environ.get("OPD_SOCKET")
        os.environ["OPD_SOCKET"] = dm.socket
        try:
            yield dm
        finally:
            if old is None:
                os.environ.pop("OPD_SOCKET", None)
            else:
                os.environ["OPD_SOCKET"] = old
            rc = dm.stop()
            assert rc == 0, "opd exited %d after SIGTERM; log:\n%s" % (rc, dm.read_log())


@pytest.fixture
def sock(daemon):
    return daemon.socket


PLUGINS_DIR = os.path.join(os.path.dirname(OPD_BIN), "plugins")
EXAMPLE_PLUGINS = ("hello", "conv3x3_bias_relu")


@pytest.fixture(scope="session")
def plugin_daemon():
    """A daemon with the example plugins (examples/plugins; `make plugins`
    builds them next to $OPD_BIN) loaded."""
    args = []
    for name in EXAMPLE_PLUGINS:
        so = os.path.join(PLUGINS_DIR, name + ".so")
        if not os.path.exists(so):
            pytest.fail("%s is missing: build it with `make plugins`" % so)
        args += ["--plugin", so]
    with tempfile.TemporaryDirectory(prefix="opd-pytest-plugins.") as d:
        dm = Daemon(d, args)
        try:
            yield dm
        finally:
            rc = dm.stop()
            assert rc == 0, "opd exited %d after SIGTERM; log:\n%s" % (rc, dm.read_log())


@pytest.fixture(scope="module")
def ops(daemon):
    """torch.ops.opd registered with a connection of its own to the daemon
    under test (the GPU modules); skips where opd.torch cannot be used."""
    try:
        import torch
        import opd.torch as ot
    except ImportError as e:
        pytest.skip(str(e))
    cl = opd.connect(daemon.socket)
    ot.register(cl)
    yield torch.ops.opd
    cl.close()


@pytest.fixture
def c(daemon):
    cl = opd.connect(daemon.socket)
    yield cl
    cl.close()


@pytest.fixture
def start_daemon(tmp_path):
    started = []

    def start(*args, preexec_fn=None):
        d = tmp_path / ("d%d" % len(started))
        d.mkdir()
        dm = Daemon(str(d), args, preexec_fn)
        started.append(dm)
        return dm
    yield start
    for dm in started:
        dm.stop()


@pytest.fixture
def rng():
    import numpy as np
    return np.random.default_rng(1234)
