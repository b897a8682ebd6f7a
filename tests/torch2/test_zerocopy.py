"""Zero-copy CPU torch tensors through torch.ops.opd (torch >= 2.4; with an
older torch every test skips): tensors opd.torch.empty makes and tensors
torch put in shared memory (share_memory_() under the file_descriptor
and file_system strategies) reach the daemon with no staging copy, each
shm file registered once and released when its storage dies; a plain
tensor is staged, and counted (opd.torch.staging(), the daemon's STATS
"staging"); results against torch's; a reused output never overwrites a
tensor still alive; a forked worker runs on a tensor received through a
torch.multiprocessing queue with no copy, writing into the parent's."""
import gc

import pytest

torch = pytest.importorskip("torch")

import opd  # noqa: E402

try:
    import opd.torch as ot  # noqa: E402
except ImportError as e:          # torch < 2.4
    pytest.skip(str(e), allow_module_level=True)

import torch.multiprocessing as tmp  # noqa: E402

STRATEGIES = ("file_descriptor", "file_system")


@pytest.fixture
def oc(c):
    """opd.torch bound to the test's connection."""
    ot.register(c)
    return c


def _staged():
    return ot.staging()[0]


def _daemon_staging(c):
    ot.flush_staging()
    return c.stats()["staging"]


def _shared(x, strategy):
    old = tmp.get_sharing_strategy()
    tmp.set_sharing_strategy(strategy)
    try:
        return x.clone().share_memory_()
    finally:
        tmp.set_sharing_strategy(old)


def test_empty_is_zero_copy(oc):
    x = torch.randn(8, 1000)
    e = ot.empty(8, 1000)
    assert e.dtype == torch.float32 and tuple(e.shape) == (8, 1000)
    e.copy_(x)
    n = _staged()
    for _ in range(3):
        torch.testing.assert_close(torch.ops.opd.softmax(e), torch.softmax(x, -1))
    out = ot.zeros((8, 1000))
    assert float(out.abs().sum()) == 0
    torch.ops.opd.softmax_out(e, out=out)
    torch.testing.assert_close(out, torch.softmax(x, -1))
    like = ot.empty_like(e, dtype=torch.float32)
    assert tuple(like.shape) == (8, 1000)
    cl = ot.clone(x)
    torch.testing.assert_close(torch.ops.opd.relu(cl), torch.relu(x))
    assert _staged() == n                     # no input nor output staged


def test_plain_tensor_is_staged_and_counted(oc):
    x = torch.randn(4, 256)
    before, d0 = _staged(), _daemon_staging(oc)
    torch.testing.assert_close(torch.ops.opd.softmax(x), torch.softmax(x, -1))
    assert _staged() == before + 1
    d1 = _daemon_staging(oc)
    assert d1["copies"] == d0["copies"] + 1
    assert d1["bytes"] == d0["bytes"] + x.numel() * 4
    # an out= tensor the daemon cannot write is a staging copy too
    o = torch.empty(4, 256)
    torch.ops.opd.softmax_out(ot.clone(x), out=o)
    torch.testing.assert_close(o, torch.softmax(x, -1))
    assert _staged() == before + 2
    # a strided view is copied (staged), results right
    t = torch.randn(256, 4).t()
    torch.testing.assert_close(torch.ops.opd.softmax(t), torch.softmax(t, -1))
    assert _staged() == before + 3


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_shared_memory_is_zero_copy(oc, strategy):
    x = torch.randn(16, 512)
    s = _shared(x, strategy)
    assert s.is_shared()
    shm0 = oc.stats()["shm"]["mapped"]
    n = _staged()
    for _ in range(3):
        torch.testing.assert_close(torch.ops.opd.softmax(s), torch.softmax(x, -1))
    # a slice of it (another offset into the same storage) and an out= in it
    torch.testing.assert_close(torch.ops.opd.softmax(s[3:7]), torch.softmax(x[3:7], -1))
    o = _shared(torch.zeros(16, 512), strategy)
    torch.ops.opd.softmax_out(s, out=o)
    torch.testing.assert_close(o, torch.softmax(x, -1))
    torch.ops.opd.relu_(o)                     # in place, in the shm file
    torch.testing.assert_close(o, torch.softmax(x, -1))
    assert _staged() == n
    assert oc._arenas.shm_count() == 2        # each storage registered once
    assert oc.stats()["shm"]["mapped"] == shm0 + 2
    # the opd Client's own path (from_torch) uses it in place too
    t = oc.from_torch(s)
    assert t.arena.kind == "shm"
    torch.testing.assert_close(torch.from_numpy(oc.relu(t).numpy()), torch.relu(x))
    del t, s, o
    gc.collect()
    oc.ping()                                 # the releases go with a call
    assert oc._arenas.shm_count() == 0
    assert oc.stats()["shm"]["mapped"] == shm0


def test_output_reuse_never_overwrites_a_live_tensor(oc):
    a, b = torch.randn(2, 300), torch.randn(2, 300)
    ya = torch.ops.opd.softmax(a)
    yb = torch.ops.opd.softmax(b)             # ya alive: new memory
    assert ya.data_ptr() != yb.data_ptr()
    torch.testing.assert_close(ya, torch.softmax(a, -1))
    row = yb[1]                               # a view keeps yb's memory
    del yb
    yc = torch.ops.opd.softmax(a)
    assert yc.data_ptr() != row.data_ptr() - row.element_size() * 300
    torch.testing.assert_close(row, torch.softmax(b, -1)[1])
    arr = yc.numpy()                          # so does a numpy array of it
    del yc
    yd = torch.ops.opd.softmax(b)
    torch.testing.assert_close(torch.from_numpy(arr), torch.softmax(a, -1))
    torch.testing.assert_close(yd, torch.softmax(b, -1))
    p = yd.data_ptr()
    del yd
    ye = torch.ops.opd.softmax(a)             # nothing holds it: reused
    assert ye.data_ptr() == p
    torch.testing.assert_close(ye, torch.softmax(a, -1))


def _worker(q, res):
    import opd.torch as wot
    try:
        x, out = q.get(timeout=60)
        n = wot.staging()[0]
        torch.ops.opd.softmax_out(x, out=out)
        res.put((wot.staging()[0] - n, wot.client()._arenas.shm_count(), ""))
    except Exception as e:                    # the parent reports it
        res.put((-1, -1, repr(e)))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_forked_worker_shared_tensor(oc, strategy):
    old = tmp.get_sharing_strategy()
    tmp.set_sharing_strategy(strategy)
    try:
        ctx = tmp.get_context("fork")
        q, res = ctx.Queue(), ctx.Queue()
        p = ctx.Process(target=_worker, args=(q, res))
        p.start()
        x = torch.randn(32, 128)
        out = torch.zeros(32, 128).share_memory_()
        q.put((x.share_memory_(), out))
        staged, shm, err = res.get(timeout=120)
        p.join(60)
    finally:
        tmp.set_sharing_strategy(old)
    assert err == "" and p.exitcode == 0
    assert staged == 0 and shm == 2           # no copy in or out in the child
    torch.testing.assert_close(out, torch.softmax(x, -1))


def test_optional_input_given_as_none(oc):
    # layernorm(x, weight=None, bias=None) positionally: the Nones dropped
    x = ot.clone(torch.randn(4, 32))
    want = torch.nn.functional.layer_norm(x, (32,))
    torch.testing.assert_close(torch.ops.opd.layernorm(x, None, None), want,
                               rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.ops.opd.layernorm(x), want, rtol=1e-4, atol=1e-4)


def test_repeated_calls_follow_their_tensors(oc):
    # a loop on the same tensors sends one prepared request; any change of
    # input tensor, of its values, or a held output, is still right
    a, b = ot.empty(3, 200), ot.empty(3, 200)
    for k in range(6):
        a.copy_(torch.randn(3, 200))
        b.copy_(torch.randn(3, 200))
        for t in (a, a, a, b, a, b, b):
            torch.testing.assert_close(torch.ops.opd.softmax(t), torch.softmax(t, -1))
        held = [torch.ops.opd.softmax(a) for _ in range(3)]
        for h in held:
            torch.testing.assert_close(h, torch.softmax(a, -1))
    del held, h
    for _ in range(3):                        # results dropped: the same request
        torch.ops.opd.softmax(a)
    p = next(reversed(ot._runners["softmax"].plans.values()))
    assert p.prep is not None
    a.copy_(torch.randn(3, 200))
    torch.testing.assert_close(torch.ops.opd.softmax(a), torch.softmax(a, -1))
