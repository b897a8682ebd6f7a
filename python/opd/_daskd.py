"""opd._daskd: a per-node opd daemon started and stopped by Dask nannies.

DESIGN
For nodes without an init system (docs/dask.md, "A daemon per node"):
OpdDaemon is a NannyPlugin whose setup() makes sure a daemon serves the
node's socket and whose teardown() stops the daemon it started. The
nannies of one node usually live in one process (`dask worker
--nworkers N`, a LocalCluster), so this module owns a table, socket path
-> [process or None, users], shared by them: the first nanny starts the
daemon (or finds one already answering, started by someone else, and
never stops it), the others count themselves in, and the last one out
sends SIGTERM and waits for the exit. The nanny's env gets OPD_SOCKET,
so workers it starts afterwards find the daemon the usual way.
Standard library only (no dask import): opd.dask wraps it.
"""
import os
import shutil
import signal
import socket as socketlib
import subprocess
import threading
import time

_lock = threading.Lock()
_daemons = {}        # socket path -> [Popen or None, users, log path]


def answers(path):
    """True when something accepts connections on the unix socket path."""
    s = socketlib.socket(socketlib.AF_UNIX)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def find_binary(binary=None):
    """The opd executable: `binary`, else $OPD_BIN, else `opd` on PATH.
    Raises FileNotFoundError naming what was tried."""
    b = binary or os.environ.get("OPD_BIN") or shutil.which("opd")
    if not b or not os.access(b, os.X_OK):
        raise FileNotFoundError("no opd executable (tried %r, $OPD_BIN and "
                                "`opd` on PATH)" % (binary,))
    return b


def start(path, binary=None, args=(), node="this node", timeout=30.0):
    """Makes sure a daemon serves `path`, starting one (binary --socket
    path *args; its output in path + ".log") when none answers; counts
    the caller as a user. Returns
    True if this call started it. Raises RuntimeError naming the node and
    quoting the daemon's log if it exits or does not answer in time."""
    with _lock:
        ent = _daemons.get(path)
        if ent is not None and (ent[0] is None or ent[0].poll() is None):
            ent[1] += 1
            return False
        if answers(path):           # someone else's: used, never stopped
            _daemons[path] = [None, 1, None]
            return False
        d = os.path.dirname(path)
        if d:
            os.makedirs(d, exist_ok=True)
        log = path + ".log"
        with open(log, "wb") as f:
            proc = subprocess.Popen([find_binary(binary), "--socket", path,
                                     *args], stdout=f, stderr=f,
                                    stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not answers(path):
            if proc.poll() is not None or time.monotonic() > deadline:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                with open(log, errors="replace") as f:
                    text = f.read()[-2000:]
                raise RuntimeError("opd.dask: the opd daemon of node %s did not "
                                   "start on %s (exit %s): %s"
                                   % (node, path, proc.returncode, text))
            time.sleep(0.02)
        _daemons[path] = [proc, 1, log]
        return True


def stop(path, timeout=20.0):
    """Counts one user of `path` out; the last one stops the daemon this
    process started (SIGTERM, then SIGKILL after `timeout`). Returns the
    daemon's exit code when it stopped one, else None."""
    with _lock:
        ent = _daemons.get(path)
        if ent is None:
            return None
        ent[1] -= 1
        if ent[1] > 0:
            return None
        del _daemons[path]
    proc = ent[0]
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    return rc


def process_of(path):
    """The Popen of the daemon this process started on `path`, or None."""
    with _lock:
        ent = _daemons.get(path)
        return ent[0] if ent else None


class OpdDaemon:
    """A Dask NannyPlugin (opd.dask subclasses it as one) that runs one opd
    daemon per node: setup() starts it on `socket` (None: the usual path,
    $OPD_SOCKET or $XDG_RUNTIME_DIR/opd.sock) unless one answers there,
    teardown() stops it with the last nanny of this process. binary: the
    opd executable (None: $OPD_BIN or `opd` on PATH); args: more options
    (e.g. ["--threads", "2"])."""

    name = "opd-daemon"
    restart = False

    def __init__(self, socket=None, binary=None, args=()):
        self.socket, self.binary, self.args = socket, binary, tuple(args)
        self.path = None

    def _path(self):
        if self.socket:
            return os.path.abspath(self.socket)
        from .client import socket_path
        return socket_path(None)

    def setup(self, nanny):
        self.path = self._path()
        start(self.path, self.binary, self.args,
              node=getattr(nanny, "address", None) or socketlib.gethostname())
        env = getattr(nanny, "env", None)
        if isinstance(env, dict):
            env.setdefault("OPD_SOCKET", self.path)

    def teardown(self, nanny):
        if self.path is not None:
            stop(self.path)
            self.path = None
