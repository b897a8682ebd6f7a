"""libopd's C kernel for torch's CPU dispatch key (opd.torch.cpu_kernels,
client/torch/cpukern.c): a call whose tensors all lie in opd's shared
memory (opd.torch.empty/clone, earlier outputs, registered share_memory_()
storages, strided views of them) runs with no Python kernel and no copy,
with results equal to the Python kernel's; every other call (a plain
tensor, an out= tensor the daemon cannot write, a shm storage met for the
first time, a zero-size tensor) still works through the Python kernel,
staged and counted; errors of both reach the caller as RuntimeError with
opd's message; opcheck and torch.compile trace the ops as before; off
again, the Python kernel serves every CPU call. Run with a torch >= 2.11
(tests/torch2/conftest.py)."""
import gc

import pytest

torch = pytest.importorskip("torch")
try:
    import opd.torch as ot
except ImportError as e:           # torch < 2.4
    pytest.skip(str(e), allow_module_level=True)
import torch.multiprocessing as tmp  # noqa: E402

F = torch.nn.functional


@pytest.fixture
def ck(tc):
    """tc with the C kernel on for torch's CPU key (off after the test)."""
    try:
        ot.cpu_kernels(True)
    except Exception as e:         # an older torch or a TORCH=0 libopd
        pytest.skip(str(e))
    yield tc
    ot.cpu_kernels(False)


class PyCalls:
    """Counts the calls the Python kernel runs (the C kernel's fallbacks)."""

    def __init__(self, monkeypatch, *names):
        self.n = 0
        for name in names:
            run = ot._runners[name]
            orig = run.call

            def call(*a, _orig=orig, **k):
                self.n += 1
                return _orig(*a, **k)
            monkeypatch.setattr(run, "call", call)


def _staged():
    return ot.staging()[0]


def _cases(g):
    """(op, args, kwargs) over tensors in opd's shared memory."""
    x = ot.clone(torch.randn(6, 40, generator=g))
    y = ot.clone(torch.randn(6, 40, generator=g))
    w = ot.clone(torch.randn(40, generator=g))
    b = ot.clone(torch.randn(40, generator=g))
    m = ot.clone(torch.randn(40, 8, generator=g))
    big = ot.clone(torch.randn(24, 40, generator=g))
    return [("softmax", (x,), {}), ("softmax", (x,), {"dim": 0}),
            ("relu", (x,), {}), ("add", (x, y), {}),
            ("layernorm", (x, w, b), {"eps": 1e-5}), ("layernorm", (x,), {}),
            ("matmul", (x, m), {}), ("softmax", (big.t(),), {}),
            ("relu", (big[1::3, ::4],), {}), ("softmax", (big[:1].expand(5, 40),), {})]


def test_results_equal_the_python_kernel(tc, monkeypatch):
    g = torch.Generator().manual_seed(1)
    cases = _cases(g)
    want = [getattr(torch.ops.opd, op)(*a, **k) for op, a, k in cases]
    ot.cpu_kernels(True)
    try:
        calls = PyCalls(monkeypatch, "softmax", "relu", "add", "layernorm", "matmul")
        n = _staged()
        for rnd in range(2):      # each signature's first call is Python's
            calls.n, n = 0, _staged()
            got = [getattr(torch.ops.opd, op)(*a, **k) for op, a, k in cases]
            for (op, _, _), w_, g_ in zip(cases, want, got):
                assert torch.equal(g_, w_), op
        assert calls.n == 0 and _staged() == n  # no Python kernel, no copy
        # an output is in shared memory: the next op reads it in place
        z = torch.ops.opd.relu(torch.ops.opd.softmax(cases[0][1][0]))
        torch.testing.assert_close(z, torch.relu(torch.softmax(cases[0][1][0], -1)))
        assert calls.n == 0 and _staged() == n
    finally:
        ot.cpu_kernels(False)


def test_out_and_in_place_forms(ck, monkeypatch):
    calls = PyCalls(monkeypatch, "softmax", "relu", "add")
    for rnd in range(2):      # the second round's signatures are known
        calls.n = 0
        x = torch.randn(5, 30)
        e = ot.clone(x)
        n = _staged()
        o = ot.zeros(5, 30)
        torch.ops.opd.softmax_out(e, out=o)
        torch.testing.assert_close(o, torch.softmax(x, -1))
        big = ot.zeros(5, 90)
        torch.ops.opd.softmax_out(e, out=big[:, 30:60])      # a strided out=
        torch.testing.assert_close(big[:, 30:60], torch.softmax(x, -1))
        assert (big[:, :30] == 0).all() and (big[:, 60:] == 0).all()
        torch.ops.opd.relu_(e)
        torch.testing.assert_close(e, torch.relu(x))
        v = ot.clone(x)
        torch.ops.opd.relu_(v[::2, 1::2])                   # in place on a view
        ref = x.clone()
        ref[::2, 1::2] = torch.relu(ref[::2, 1::2])
        torch.testing.assert_close(v, ref)
    assert calls.n == 0 and _staged() == n     # no Python kernel, no copy


def test_torch_semantics_stay_with_the_python_kernel(ck, monkeypatch):
    # a signature torch's semantics change (_torchsem.adjust: type
    # promotion, integer division) is the Python kernel's every time
    calls = PyCalls(monkeypatch, "add", "div")
    a = ot.clone(torch.randn(4, 8))
    b = ot.clone(torch.randn(4, 8, dtype=torch.float64))
    i = ot.clone(torch.arange(1, 9, dtype=torch.int32).reshape(2, 4))
    j = ot.clone(torch.full((2, 4), 3, dtype=torch.int32))
    for _ in range(3):
        got = torch.ops.opd.add(a, b)
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, a + b)
        torch.testing.assert_close(torch.ops.opd.div(i, j), i / j)
    assert calls.n >= 6                        # each call reached Python
    before = calls.n
    c = ot.clone(torch.randn(4, 8))            # the same dtypes: C's after one
    for _ in range(3):
        torch.testing.assert_close(torch.ops.opd.add(a, c), a + c)
    assert calls.n - before <= 1


def test_what_it_cannot_serve_falls_back(ck, monkeypatch):
    calls = PyCalls(monkeypatch, "softmax", "relu", "add")
    x = torch.randn(4, 256)
    n = _staged()
    torch.testing.assert_close(torch.ops.opd.softmax(x), torch.softmax(x, -1))
    assert calls.n == 1 and _staged() == n + 1          # staged, counted
    # one plain input among arena ones: the whole call goes to Python
    e = ot.clone(x)
    torch.testing.assert_close(torch.ops.opd.add(e, x), x + x)
    assert calls.n == 2
    # an out= tensor the daemon cannot write: a temporary, copied back
    o = torch.empty(4, 256)
    torch.ops.opd.softmax_out(e, out=o)
    torch.testing.assert_close(o, torch.softmax(x, -1))
    assert calls.n == 3 and _staged() == n + 3
    # in place on a plain tensor
    p = x.clone()
    torch.ops.opd.relu_(p)
    torch.testing.assert_close(p, torch.relu(x))
    assert calls.n == 4
    # zero-size tensors
    z = ot.empty(0, 8)
    assert torch.ops.opd.relu(z).shape == (0, 8)
    assert calls.n == 5


@pytest.mark.parametrize("strategy", ("file_descriptor", "file_system"))
def test_shared_memory_is_served_once_registered(ck, monkeypatch, strategy):
    calls = PyCalls(monkeypatch, "softmax")
    x = torch.randn(16, 64)
    old = tmp.get_sharing_strategy()
    tmp.set_sharing_strategy(strategy)
    try:
        s = x.clone().share_memory_()
    finally:
        tmp.set_sharing_strategy(old)
    n = _staged()
    for _ in range(3):        # the first registers the storage, the plan
        torch.testing.assert_close(torch.ops.opd.softmax(s), torch.softmax(x, -1))
    first = calls.n           # made by it or the next (or an earlier test)
    assert 1 <= first <= 2
    for _ in range(2):
        torch.testing.assert_close(torch.ops.opd.softmax(s[3:7]), torch.softmax(x[3:7], -1))
        torch.testing.assert_close(torch.ops.opd.softmax(s[9:13]), torch.softmax(x[9:13], -1))
    assert calls.n <= first + 1 and _staged() == n
    assert ck._arenas.shm_count() == 1
    del s
    gc.collect()
    ck.ping()                                  # the release goes with a call
    assert ck._arenas.shm_count() == 0


def test_outputs_come_back_to_the_allocator(ck):
    e = ot.clone(torch.randn(3, 500))
    torch.ops.opd.softmax(e)                   # the signature's plan
    y = torch.ops.opd.softmax(e)
    p = y.data_ptr()
    keep = y[1]                                # a view keeps the block
    del y
    y2 = torch.ops.opd.softmax(e)
    assert y2.data_ptr() != p
    torch.testing.assert_close(keep, torch.softmax(e, -1)[1])
    del keep, y2
    y3 = torch.ops.opd.softmax(e)              # nothing holds them: reused
    assert y3.data_ptr() == p
    big = [torch.ops.opd.relu(ot.clone(torch.randn(1024, 1024))) for _ in range(20)]
    for t in big:                              # several arenas, all right
        assert (t >= 0).all()
    assert _output_arenas() >= 5               # 16 MiB arenas of 4 MiB blocks
    del big, t
    gc.collect()
    torch.ops.opd.softmax(e)                   # empty ones go but one spare
    assert _output_arenas() <= 2


def _output_arenas():
    """The C kernel's output arenas mapped in this process."""
    with open("/proc/self/maps") as f:
        return len({line.split()[4] for line in f if "/memfd:opd-torch" in line})


def test_repeated_calls_follow_their_tensors(ck, monkeypatch):
    # a call repeating the last request (same tensors, its output block
    # given back) is sent prepared: any change of tensor, of values, or a
    # held output is still right
    calls = PyCalls(monkeypatch, "softmax")
    a, b = ot.empty(3, 200), ot.empty(3, 200)
    for _ in range(4):
        a.copy_(torch.randn(3, 200))
        b.copy_(torch.randn(3, 200))
        for t in (a, a, a, b, a, b, b):
            torch.testing.assert_close(torch.ops.opd.softmax(t), torch.softmax(t, -1))
        held = [torch.ops.opd.softmax(a) for _ in range(3)]
        assert len({h.data_ptr() for h in held}) == 3
        for h in held:
            torch.testing.assert_close(h, torch.softmax(a, -1))
        torch.testing.assert_close(torch.ops.opd.softmax(a, dim=0), torch.softmax(a, 0))
    assert calls.n == 2                        # each signature's first call


def test_errors_name_the_op(ck):
    e = ot.clone(torch.randn(4, 8))
    with pytest.raises(RuntimeError, match=r"opd: softmax: dim=5 is out of range"):
        torch.ops.opd.softmax(e, dim=5)
    with pytest.raises(RuntimeError, match=r"opd: softmax: dim=5 is out of range"):
        torch.ops.opd.softmax(torch.randn(4, 8), dim=5)    # through the fallback
    with pytest.raises(RuntimeError, match=r"opd: softmax_out: output 0 has dtype "
                       r"float32 and shape \(4, 7\); the op's output here is "
                       r"float32 \(4, 8\)"):
        torch.ops.opd.softmax_out(e, out=ot.empty(4, 7))
    with pytest.raises(RuntimeError, match="add"):
        torch.ops.opd.add(e, ot.empty(3, 8))
    torch.testing.assert_close(torch.ops.opd.softmax(e), torch.softmax(e, -1))


def test_opcheck_and_compile(ck):
    e = ot.clone(torch.randn(4, 16))
    x = torch.randn(4, 16)
    for args in ((e,), (x,)):
        torch.library.opcheck(torch.ops.opd.softmax.default, args, {})
        torch.library.opcheck(torch.ops.opd.relu.default, args, {})
    torch.library.opcheck(torch.ops.opd.softmax_out.default, (e,), {"out": ot.empty(4, 16)})

    def f(t):
        return torch.ops.opd.relu(torch.ops.opd.softmax(t)) * 2
    g = torch.compile(f, fullgraph=True, backend="eager")
    torch.testing.assert_close(g(e), f(x.copy_(e)))


def test_off_gives_the_python_kernel_back(tc):
    ot.cpu_kernels(True)
    ot.cpu_kernels(False)
    import opd
    with pytest.raises(opd.BadArgumentError, match="softmax: dim=5"):
        torch.ops.opd.softmax(ot.clone(torch.randn(2, 3)), dim=5)
    ot.cpu_kernels(True)                       # on again: a new library
    try:
        e = ot.clone(torch.randn(2, 3))
        torch.testing.assert_close(torch.ops.opd.softmax(e), torch.softmax(e, -1))
    finally:
        ot.cpu_kernels(False)
