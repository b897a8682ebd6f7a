"""The allocator: reuse, coalescing, growth, arena release, no leaks."""
import gc

import numpy as np

import opd
from opd import memory


def test_long_loop_does_not_leak(c):
    base = c.stats()["bytes_mapped"]
    a = np.random.rand(16, 256).astype(np.float32)
    for i in range(10000):
        y = c.softmax(c.from_numpy(a))
        if i % 2500 == 0:
            assert abs(y.numpy().sum() - 16) < 1e-3
    st = c.memory_stats()
    assert st["arenas"] == 1 and st["bytes_used"] < 1 << 20
    assert c.stats()["bytes_mapped"] - base <= memory.MIN_ARENA


def test_space_is_reused(c):
    x = c.empty(1000)
    p = x.data_ptr()
    del x
    assert c.empty(1000).data_ptr() == p


def test_growth_and_release(c):
    base = c.stats()["bytes_mapped"]
    big = [c.empty((40 << 20) // 4) for _ in range(3)]        # 3 x 40 MiB arenas
    assert c.memory_stats()["arenas"] >= 3
    assert c.stats()["bytes_mapped"] - base >= 120 << 20
    del big
    gc.collect()
    st = c.memory_stats()
    assert st["bytes_used"] == 0 and st["arenas"] == 1      # one spare kept
    assert c.stats()["bytes_mapped"] - base <= 40 << 20


def test_tensor_outlives_closed_client(sock):
    c = opd.connect(sock)
    x = c.from_numpy(np.arange(4, dtype=np.float32))
    c.close()
    assert x.tolist() == [0, 1, 2, 3]           # memory is the package's
    with opd.connect(sock) as c2:               # and usable by another client
        assert c2.relu(x).tolist() == [0, 1, 2, 3]


def test_allocator_coalesces():
    made = []

    def create(size):
        a = memory.create_arena(size)
        made.append(a)
        return a
    al = memory.Allocator(create, lambda a: made.remove(a), memory.fork_generation())
    blocks = [al.alloc(1000) for _ in range(10)]
    assert [b.offset for b in blocks] == [i * 1024 for i in range(10)]
    del blocks[3:6]
    b = al.alloc(3 * 1024)                   # fits exactly in the joined hole
    assert b.offset == 3 * 1024
    del blocks, b
    st = al.stats()
    assert st["bytes_used"] == 0 and st["arenas"] == 1
    s = al._states[0]
    assert s.offs == [0] and s.sizes == [s.arena.size]
    big = al.alloc(memory.MIN_ARENA + 1)     # a second, bigger arena
    assert len(made) == 2 and big.state.arena.size == memory.MIN_ARENA + memory.ARENA_ROUND
    del big
    al.drain()
    assert len(made) == 1 and made[0].size > memory.MIN_ARENA   # the bigger spare stays


def test_stats_list_the_gpus(c):
    """stats: "devices" counts the CUDA devices, "gpus" lists them as the
    hello does (with each one's runs so far): none on a daemon without."""
    st = c.stats()
    assert isinstance(st["gpus"], list) and len(st["gpus"]) == st["devices"]
    assert [g["uuid"] for g in st["gpus"]] == \
        [d["uuid"] for d in c.server_info().get("devices") or []]
