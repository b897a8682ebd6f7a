"""Shared-memory files the daemon maps without a seal (arena_register with
"shm": a POSIX shm file, what torch's share_memory_() makes): a run reads
and writes them in place; a file that is not on tmpfs, or whose size is
not the one claimed, is refused naming why; a file truncated under the
daemon's mapping costs the daemon nothing (its SIGBUS guard maps zeros
and STATS counts the fault); staging copies are counted in STATS
("staging") and by from_torch of a plain CPU torch tensor, while a torch
view of an opd tensor reaches the daemon in place."""
import gc
import mmap
import os
import subprocess
import tempfile

import numpy as np
import pytest

import opd
from opd import protocol
from opd.tensor import Tensor

OPCTL = os.path.join(os.path.dirname(os.environ.get("OPD_BIN") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build", "opd")), "opctl")


def _shm_file(nbytes, data=None):
    """(fd, mmap) of a new /dev/shm file of nbytes, unlinked."""
    fd, path = tempfile.mkstemp(prefix="opd-test-", dir="/dev/shm")
    os.unlink(path)
    os.ftruncate(fd, nbytes)
    m = mmap.mmap(fd, nbytes)
    if data is not None:
        m[:len(data)] = data
    return fd, m


class _Owner:
    """Stands for the memory's owner (a torch storage): its death releases."""


def _register(c, fd, size, base, data_off=0):
    owner = _Owner()
    a = c._arenas.register_shm(("test", fd), owner, fd, size, base, data_off)
    return a, owner


def _addr(m):
    import ctypes
    return ctypes.addressof(ctypes.c_char.from_buffer(m))


def test_shm_file_read_and_written_in_place(c):
    x = np.random.rand(256).astype(np.float32) - 0.5
    n = x.nbytes
    fd, m = _shm_file(2 * n, x.tobytes())
    try:
        a, owner = _register(c, fd, 2 * n, _addr(m))
        assert a and a.kind == "shm"
        mapped = c.stats()["shm"]["mapped"]
        assert mapped >= 1
        xi = Tensor(a, 0, "float32", (256,), None, m)
        yo = Tensor(a, n, "float32", (256,), None, m)
        c.relu(xi, out=yo)
        got = np.frombuffer(m, np.float32, 256, n)
        assert np.array_equal(got, np.maximum(x, 0))
        del xi, yo, owner, got
        gc.collect()
        c.ping()
        assert c.stats()["shm"]["mapped"] == mapped - 1
    finally:
        m.close()
        os.close(fd)


def test_not_a_shm_file_is_refused(c, tmp_path):
    if _is_tmpfs(str(tmp_path)):
        pytest.skip("the temp dir is on tmpfs")
    p = tmp_path / "plain"
    p.write_bytes(b"\0" * 4096)
    fd = os.open(str(p), os.O_RDWR)
    try:
        with pytest.raises(opd.OpdError) as e:
            opd.errors.check(_raw_register(c, fd, 4096))
        assert e.value.code == protocol.EFD and "tmpfs" in str(e.value)
        # through the package: refused once, remembered, not retried
        owner = _Owner()
        assert c._arenas.register_shm(("plain",), owner, fd, 4096, 0, 0) is False
        assert c._arenas.shm[("plain",)] is False
        del owner
        gc.collect()
        assert ("plain",) not in c._arenas.shm
    finally:
        os.close(fd)
    fd, m = _shm_file(4096)
    try:
        with pytest.raises(opd.OpdError) as e:          # the size claimed is wrong
            opd.errors.check(_raw_register(c, fd, 8192))
        assert e.value.code == protocol.EINVAL
        assert "8192" in str(e.value) and "4096" in str(e.value)
    finally:
        m.close()
        os.close(fd)


def _is_tmpfs(path):
    with open("/proc/mounts") as f:
        best, typ = "", ""
        for line in f:
            parts = line.split()
            if path.startswith(parts[1]) and len(parts[1]) > len(best):
                best, typ = parts[1], parts[2]
    return typ == "tmpfs"


def _raw_register(c, fd, size):
    import ctypes
    fn = c._lib.opd_arena_register_shm
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64,
                   ctypes.POINTER(ctypes.c_uint64)]
    fn.restype = ctypes.c_int
    aid = ctypes.c_uint64()
    return fn(c._handle(), fd, size, ctypes.byref(aid))


def test_truncated_shm_file_does_not_kill_the_daemon(c):
    n = 1 << 20
    fd, m = _shm_file(2 * n)
    try:
        a, owner = _register(c, fd, 2 * n, _addr(m))
        assert a
        faults = c.stats()["shm"]["faults"]
        os.ftruncate(fd, 4096)                       # shrunk under the daemon
        xi = Tensor(a, 0, "float32", (n // 4,), None, m)
        yo = Tensor(a, n, "float32", (n // 4,), None, m)
        c.relu(xi, out=yo)                           # reads past the end
        st = c.stats()
        assert st["shm"]["faults"] == faults + 1 and st["healthy"]
        # the daemon serves on; other memory is unharmed
        z = c.relu(c.from_numpy(np.array([-1.0, 2.0], np.float32)))
        assert z.numpy().tolist() == [0.0, 2.0]
        del xi, yo, owner
        gc.collect()
        c.ping()
    finally:
        os.close(fd)                 # m stays mapped: touching it would fault


def test_staging_counted_in_stats(c):
    torch = pytest.importorskip("torch")
    st0 = c.stats()["staging"]
    x = torch.randn(8, 64)
    t = c.from_torch(x)                              # a plain tensor: copied
    assert np.array_equal(t.numpy(), x.numpy())
    c._arenas.flush_staging()
    st1 = c.stats()["staging"]
    assert st1["copies"] == st0["copies"] + 1
    assert st1["bytes"] == st0["bytes"] + 8 * 64 * 4
    v = c.empty((8, 64)).torch()                     # opd's memory: in place
    v.copy_(x)
    t2 = c.from_torch(v)
    assert t2.data_ptr() == v.data_ptr()
    assert np.array_equal(c.relu(t2).numpy(), np.maximum(x.numpy(), 0))
    c._arenas.flush_staging()
    assert c.stats()["staging"] == st1


def test_opctl_stats_prints_staging_and_shm(c, daemon):
    c.from_torch(pytest.importorskip("torch").randn(3, 5))
    c._arenas.flush_staging()
    st = c.stats()
    out = subprocess.run([OPCTL, "--socket", daemon.socket, "stats"],
                         capture_output=True, text=True, timeout=30).stdout
    lines = {ln[:18].strip(): ln[18:].strip() for ln in out.splitlines()}
    assert int(lines["staging copies"]) >= st["staging"]["copies"] >= 1
    assert int(lines["staging bytes"]) >= st["staging"]["bytes"] >= 60
    assert lines["shm arenas"] == str(st["shm"]["mapped"])
    assert lines["shm faults"] == str(st["shm"]["faults"])
