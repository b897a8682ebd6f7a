"""A flood of connections against a daemon with few fds (ulimit -n 256, soft
and hard): the daemon caps its sessions below the fd limit, with a
reserve, so the flood is refused by name ("too many clients ... fd limit")
while a client already connected keeps registering arenas; a soft limit
below the hard one is raised at start."""
import resource
import socket

import numpy as np
import pytest

import opd


def _nofile(soft, hard):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return set_limit


def test_a_connection_flood_leaves_connected_clients_their_fds(start_daemon):
    dm = start_daemon(preexec_fn=_nofile(256, 256))
    assert "lowered to" in dm.read_log()
    c = opd.connect(dm.socket)
    flood, refused = [], None
    try:
        for _ in range(400):                 # held open, never a hello
            s = socket.socket(socket.AF_UNIX)
            s.connect(dm.socket)
            flood.append(s)
        with pytest.raises(opd.LimitError) as e:
            opd.connect(dm.socket)
        refused = str(e.value)
        # the client already served still gets fds for new arenas
        ts = [c.empty((1 << 16,), "float32") for _ in range(40)]
        for k, t in enumerate(ts):
            t.numpy()[:] = k
        out = c.add(ts[3], ts[5])
        np.testing.assert_array_equal(out.numpy(), np.full(1 << 16, 8, np.float32))
    finally:
        for s in flood:
            s.close()
        c.close()
    assert "too many clients" in refused and "fd limit 256" in refused, refused


def test_the_soft_fd_limit_is_raised_to_the_hard_one(start_daemon):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard <= 512:
        pytest.skip("the hard fd limit here is %s" % hard)
    dm = start_daemon(preexec_fn=_nofile(256, hard))
    with opd.connect(dm.socket) as c:
        assert "add" in c.ops()
    assert "fd limit raised from 256 to the hard limit %d" % hard in dm.read_log()
