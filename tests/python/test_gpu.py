"""The GPU path of the opd package against torch, on the GPU machine.

Skips the whole module, with the reason, when torch is not importable,
torch sees no CUDA device, or the daemon under test has none. Covered:
every operator and float dtype the daemon lists (float32, float16,
bfloat16) on device tensors against torch on random shapes, with
tolerances per dtype (references in float64); device tensors (empty,
zeros, to/cpu/numpy, chains that stay on the GPU, staged host runs);
zero-copy torch views of device tensors (t.torch(): the daemon's CUDA
VMM export mapped here; shared memory both ways, dtypes, strided views,
ordering, release and close with live views);
torch CUDA tensors as inputs and in-place outputs (CUDA IPC import,
views with storage offsets, the import cache); publish/attach across
processes; 16 worker processes at once; bad input (a device that does
not exist, an IPC range past its allocation, a handle that does not
open, writes to an attached tensor, a name nothing is published under,
device memory exhausted).
"""
import multiprocessing as mp
import os
import sys

import numpy as np
import pytest

import opd

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)
import torch.nn.functional as F  # noqa: E402

import _gpu_workers  # noqa: E402

DEV = "cuda:0"
FLOATS = ("float32", "float16", "bfloat16")
# (atol, rtol) per dtype, against a float64 reference of the same inputs
TOL = {"float32": (1e-5, 1e-4), "float16": (2e-3, 1e-2), "bfloat16": (1.5e-2, 2e-2)}
# norms and products reach larger magnitudes and sum more terms
TOL_WIDE = {"float32": (1e-4, 1e-4), "float16": (5e-3, 1e-2), "bfloat16": (4e-2, 3e-2)}


@pytest.fixture(scope="module", autouse=True)
def gpu_daemon(daemon):
    with opd.connect(daemon.socket) as c:
        devs = c.devices()
    if not devs:
        pytest.skip("the daemon under test reports no CUDA device "
                    "(a CPU-only build, or no GPU visible to it)")
    return devs


def tdtype(name):
    return getattr(torch, name)


def dtypes_of(c, op):
    listed = c.ops()[op]["inputs"][0]["dtypes"]
    return [d for d in FLOATS if d in listed]


def gen(seed):
    return torch.Generator(device=DEV).manual_seed(seed)


def randn(shape, dtype, seed, scale=1.0):
    x = torch.randn(shape, generator=gen(seed), device=DEV, dtype=torch.float32)
    return (x * scale).to(tdtype(dtype))


def to_dev(c, xt):
    """An opd device tensor with xt's values, made without CUDA IPC: a host
    tensor (torch CPU -> shared memory) copied to the device by the daemon."""
    h = c.from_torch(xt.detach().cpu())
    d = h.to(DEV, client=c)
    assert d.device == DEV and d.arena.base is None
    return d


def back(t):
    """A float64 CPU torch tensor of an opd tensor's values (through a host copy)."""
    h = t.cpu()
    assert h.device == "cpu" and h.arena.base is not None
    return torch.from_dlpack(h).clone().double()


def check(got, ref, dtype, tol=TOL):
    atol, rtol = tol[dtype]
    got = back(got) if isinstance(got, opd.Tensor) else got.detach().double().cpu()
    torch.testing.assert_close(got, ref.detach().double().cpu(), atol=atol, rtol=rtol)


# ---- every operator and dtype against torch ----------------------------------

ROWS = [(1, 1024), (7, 13), (3, 5, 1000), (64, 4097), (2, 8192), (1, 1), (5, 1, 33)]


@pytest.mark.parametrize("shape", ROWS)
def test_rowwise_and_unary(c, shape):
    for i, dt in enumerate(dtypes_of(c, "softmax")):
        xt = randn(shape, dt, 100 + i, scale=3.0)
        x64 = xt.double()
        x = to_dev(c, xt)
        y = c.softmax(x)
        assert y.device == DEV and y.dtype == dt and y.shape == shape
        check(y, torch.softmax(x64, -1), dt)
        check(c.relu(x), torch.relu(x64), dt)
        check(c.gelu(x), F.gelu(x64), dt)
        check(c.gelu(x, approximate="tanh"), F.gelu(x64, approximate="tanh"), dt)
        check(c.copy(x), x64, dt)


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (4, 1023), (2, 3, 256), (1, 4097), (33, 8192)])
def test_norms(c, shape):
    for i, dt in enumerate(dtypes_of(c, "layernorm")):
        xt = randn(shape, dt, 200 + i, scale=2.0)
        wt, bt = randn(shape[-1:], dt, 300 + i), randn(shape[-1:], dt, 400 + i)
        x64, w64, b64 = xt.double(), wt.double(), bt.double()
        x, w, b = to_dev(c, xt), to_dev(c, wt), to_dev(c, bt)
        n = shape[-1:]
        check(c.layernorm(x), F.layer_norm(x64, n, eps=1e-5), dt, TOL_WIDE)
        check(c.layernorm(x, w, b, eps=1e-3), F.layer_norm(x64, n, w64, b64, eps=1e-3),
              dt, TOL_WIDE)
        check(c.rmsnorm(x, eps=1e-6), F.rms_norm(x64, n, eps=1e-6), dt, TOL_WIDE)
        check(c.rmsnorm(x, w, eps=1e-6), F.rms_norm(x64, n, w64, eps=1e-6), dt, TOL_WIDE)


@pytest.mark.parametrize("sa,sb", [((5,), (5,)), ((3, 4), (4,)), ((2, 1, 7), (3, 1)),
                                   ((1,), (6, 6)), ((4, 1, 3), (1, 5, 3)),
                                   ((64, 1000), (1000,)), ((8, 1, 512), (1, 16, 512))])
def test_binary_broadcast(c, sa, sb):
    for i, dt in enumerate(dtypes_of(c, "add")):
        at, bt = randn(sa, dt, 500 + i), randn(sb, dt, 600 + i)
        a, b = to_dev(c, at), to_dev(c, bt)
        check(c.add(a, b), at.double() + bt.double(), dt)
        check(c.mul(a, b), at.double() * bt.double(), dt)


@pytest.mark.parametrize("sa,sb", [((3, 5), (5, 2)), ((1, 1), (1, 1)), ((17, 33), (33, 9)),
                                   ((2, 4, 6), (6, 3)), ((7,), (7, 4)), ((4, 7), (7,)),
                                   ((3, 1, 2, 5), (4, 5, 6)), ((8, 64, 128), (8, 128, 96)),
                                   ((1, 4096), (4096, 1024)), ((256, 512), (512, 384))])
def test_matmul_batched(c, sa, sb):
    k = sa[-1]
    for i, dt in enumerate(dtypes_of(c, "matmul")):
        at = randn(sa, dt, 700 + i, scale=k ** -0.5)
        bt = randn(sb, dt, 800 + i)
        got = c.matmul(to_dev(c, at), to_dev(c, bt))
        ref = torch.matmul(at.double(), bt.double())
        assert got.shape == tuple(ref.shape)
        check(got, ref, dt, TOL_WIDE)


CONVS = [  # (N, C, H, W), (K, R, S), stride, padding, dilation
    ((1, 3, 32, 32), (8, 3, 3), 1, 1, 1),
    ((2, 16, 17, 23), (32, 3, 3), 1, 0, 1),
    ((2, 8, 20, 20), (16, 3, 3), 2, 1, 1),
    ((1, 4, 15, 15), (6, 5, 5), 1, 2, 2),
    ((3, 5, 12, 19), (7, 1, 1), 1, 0, 1),
    ((1, 6, 24, 24), (4, 3, 5), (2, 1), (1, 2), (1, 2)),
    ((4, 64, 14, 14), (64, 3, 3), 1, 1, 1),
]


@pytest.mark.parametrize("xs,ws,stride,padding,dilation", CONVS)
def test_conv2d(c, xs, ws, stride, padding, dilation):
    k, r, s = ws
    fan = xs[1] * r * s
    for i, dt in enumerate(dtypes_of(c, "conv2d")):
        xt = randn(xs, dt, 900 + i)
        wt = randn((k, xs[1], r, s), dt, 1000 + i, scale=fan ** -0.5)
        bt = randn((k,), dt, 1100 + i)
        ref = F.conv2d(xt.double(), wt.double(), bt.double(), stride=stride,
                       padding=padding, dilation=dilation)
        got = c.conv2d(to_dev(c, xt), to_dev(c, wt), to_dev(c, bt), stride=stride,
                       padding=padding, dilation=dilation)
        assert got.shape == tuple(ref.shape)
        check(got, ref, dt, TOL_WIDE)
        ref = F.conv2d(xt.double(), wt.double(), None, stride=stride,
                       padding=padding, dilation=dilation)
        got = c.conv2d(to_dev(c, xt), to_dev(c, wt), stride=stride,
                       padding=padding, dilation=dilation)
        check(got, ref, dt, TOL_WIDE)


@pytest.mark.parametrize("n,iou", [(1, 0.5), (10, 0.5), (500, 0.5), (2000, 0.3), (5000, 0.7)])
def test_nms_vs_torchvision(c, n, iou):
    tv = pytest.importorskip("torchvision", reason="torchvision is not installed")
    g = gen(n)
    xy = torch.rand((n, 2), generator=g, device=DEV) * 200
    wh = torch.rand((n, 2), generator=g, device=DEV) * 40 + 1
    boxes = torch.cat([xy, xy + wh], 1).contiguous()
    scores = torch.rand((n,), generator=g, device=DEV)
    ref = tv.ops.nms(boxes, scores, iou).cpu()
    keep = c.nms(to_dev(c, boxes), to_dev(c, scores), iou)          # device tensors
    assert keep.device == DEV and keep.dtype == "int64"
    assert keep.cpu().numpy().tolist() == ref.tolist()
    keep = c.nms(boxes, scores, iou)                                # torch, in place
    assert keep.numpy().tolist() == ref.tolist()


# ---- device tensors ------------------------------------------------------------

def test_device_tensors(c):
    z = c.zeros((300, 7), "float32", device="cuda")
    assert z.device == DEV and z.is_cuda and "cuda:0" in repr(z)
    assert not z.numpy().any()
    a = np.arange(2100, dtype=np.float32).reshape(300, 7)
    x = c.from_numpy(a, device="cuda")
    assert x.device == DEV
    h = x.cpu()
    assert h.device == "cpu" and (h.numpy() == a).all()
    assert (x.numpy() == a).all()                       # a host copy
    cp = x.numpy()
    cp[0, 0] = -1
    assert x.numpy()[0, 0] == 0                         # ... not a view
    assert (np.asarray(x) == a).all()
    assert x.to("cuda") is x and x.cuda() is x and h.cpu() is h
    assert (x[5:9].numpy() == a[5:9]).all()             # a view, copied
    assert (x.reshape(7, 300).numpy() == a.reshape(7, 300)).all()
    for dt in ("int64", "uint8", "float16", "bool"):
        v = np.arange(10).astype(dt)
        t = c.from_numpy(v, device="cuda")
        assert t.dtype == dt and (t.numpy() == v).all()
    bf = c.from_torch(torch.arange(10, dtype=torch.bfloat16)).to("cuda", client=c)
    assert torch.equal(torch.from_dlpack(bf.cpu()), torch.arange(10, dtype=torch.bfloat16))
    assert x.tobytes() == a.tobytes()
    x.copy_from_bytes(np.ones_like(a).tobytes())
    assert (x.numpy() == 1).all()
    with pytest.raises(opd.BackendError):
        x.data_ptr()
    with pytest.raises(BufferError):
        x.__dlpack__()
    with pytest.raises(TypeError):
        import pickle
        pickle.dumps(x)
    assert x.__dlpack_device__() == (2, 0)
    assert c.empty_like(x).device == DEV and c.zeros_like(x, device="cpu").device == "cpu"
    assert (c.ones((3, 3), device="cuda").numpy() == 1).all()


def test_chain_stays_on_device(c):
    xt = randn((64, 1000), "float32", 1)
    x = to_dev(c, xt)
    y = c.relu(c.softmax(x))
    w = c.layernorm(c.add(y, x))
    assert y.device == DEV and w.device == DEV
    ref = F.layer_norm(torch.softmax(xt.double(), -1).relu() + xt.double(), (1000,))
    check(w, ref, "float32", TOL_WIDE)
    out = c.empty_like(x)
    assert c.gelu(x, out=out) is out


def test_staged_host_run_on_cuda(c):
    for dt in ("float32", "float16", "bfloat16"):
        xt = randn((33, 257), dt, 2, scale=2.0)
        hx = c.from_torch(xt.cpu())
        y = c.softmax(hx, device="cuda")                 # host in, host out
        assert y.device == "cpu" and y.arena.base is not None
        check(y, torch.softmax(xt.double(), -1), dt)
        # "auto": host tensors go to the least-loaded GPU (the cpu takes
        # float32 only, so float16 shows where it ran); none given: the cpu
        runs0 = c.stats()["gpus"][0]["runs"]
        ya = c.softmax(hx, device="auto")
        assert ya.device == "cpu"                        # a host result
        assert c.stats()["gpus"][0]["runs"] > runs0      # run on cuda:0
        check(ya, torch.softmax(xt.double(), -1), dt)
        if dt != "float32":
            with pytest.raises(opd.OpdError, match="float16|bfloat16"):
                c.softmax(hx)


def test_tensor_torch_is_a_copy_when_not_exportable(c):
    xt = randn((16, 32), "float32", 3)
    x = to_dev(c, xt)
    x.arena.exportable = False          # as if the daemon had no CUDA VMM
    opd.tensor._warned_copy.clear()
    with pytest.warns(RuntimeWarning, match="returns a copy"):
        t = x.torch()
    assert t.is_cuda and t.dtype == torch.float32 and torch.equal(t, xt)
    t.zero_()
    assert torch.equal(torch.from_dlpack(x.cpu()), xt.cpu())     # x unchanged
    b = c.from_numpy(np.ones(4, np.float32), device="cuda")
    b.arena.exportable = False
    assert b.torch().dtype == torch.float32


# ---- zero-copy torch views of device tensors (CUDA VMM export) ----------------

def test_torch_view_shares_memory(c):
    a = np.arange(4096, dtype=np.float32).reshape(4, 1024) - 2048
    t = c.empty((4, 1024), "float32", device="cuda")
    assert t.arena.exportable                    # the daemon made VMM memory
    c.copy(c.from_numpy(a), out=t)
    v = t.torch()
    assert v.is_cuda and v.device == torch.device(DEV)
    assert v.dtype == torch.float32 and tuple(v.shape) == (4, 1024)
    assert torch.equal(v.cpu(), torch.from_numpy(a))
    v2 = t.torch()
    assert v2.data_ptr() == v.data_ptr()         # one mapping per arena
    n = c.torch_views()
    assert n >= 1
    c.relu(t, out=t)                             # the daemon writes ...
    torch.cuda.synchronize()
    ref = np.maximum(a, 0)
    assert torch.equal(v.cpu(), torch.from_numpy(ref))   # ... v sees it
    v.mul_(2)                                    # torch writes ...
    torch.cuda.synchronize()
    assert (t.numpy() == 2 * ref).all()          # ... the daemon reads it
    r = t[2].torch()                             # a view at an offset
    assert r.data_ptr() == v.data_ptr() + 2 * 1024 * 4
    assert torch.equal(r, v[2])
    u = c.empty((8,), "float32", device="cuda")  # same arena: same mapping
    if u.arena is t.arena:
        u.torch()
        assert c.torch_views() == n
    w = c.relu(t)                                # an output is viewable too
    assert torch.equal(w.torch(), v)


def test_torch_view_ordering(c):
    # torch's pending writes into a view are finished before the next run
    # that touches the tensor: such runs are ordered with torch's current
    # stream (docs/async.md), with no explicit synchronize here
    t = c.zeros((1 << 20,), "float32", device="cuda")
    plain = c.zeros((4,), "float32", device="cuda")
    c.relu(t, out=t)
    v = t.torch()
    torch.cuda._sleep(100_000_000)               # keep torch's stream busy
    v.fill_(-3.0)
    y = c.relu(c.add(t, t))                      # no explicit synchronize
    assert (t.numpy() == -3).all() and (y.numpy() == 0).all()
    assert (c.mul(t, t).numpy() == 9).all()
    if plain.arena is t.arena:                   # same arena: torch may
        c.relu(plain, out=plain)                 # write it through a view
        assert (plain.numpy() == 0).all()
    del v
    c.relu(t, out=t)                             # no live view
    assert (t.numpy() == 0).all()


@pytest.mark.parametrize("dt", ["float16", "bfloat16", "float32", "int64",
                                "int32", "uint8", "bool"])
def test_torch_view_dtypes(c, dt):
    if dt in FLOATS:
        xt = randn((33, 65), dt, 30, scale=4.0)
    elif dt == "bool":
        xt = torch.arange(33 * 65, device=DEV).reshape(33, 65) % 3 == 0
    else:
        xt = (torch.arange(33 * 65, device=DEV).reshape(33, 65) % 251).to(tdtype(dt))
    x = to_dev(c, xt)
    v = x.torch()
    assert v.dtype == xt.dtype and v.is_cuda and torch.equal(v, xt)
    assert x.torch().data_ptr() == v.data_ptr()
    pt = x.permute(1, 0).torch()                 # strided: a strided view
    assert not pt.is_contiguous() and pt.data_ptr() == v.data_ptr()
    assert torch.equal(pt, xt.t())
    if dt in FLOATS:
        c.relu(x, out=x)
        assert torch.equal(v, torch.relu(xt))    # the daemon's write, seen
        v.neg_()
        torch.cuda.synchronize()
        assert torch.equal(torch.from_dlpack(x.cpu()).to(DEV), -torch.relu(xt))


def test_torch_view_release_and_close(daemon):
    c = opd.connect(daemon.socket)
    # a released arena's mapping is dropped: an arena with a view, another
    # after it; both freed, one is given back (spare 0: the device
    # allocator keeps no empty arenas besides one)
    c._dalloc("cuda:0").spare = 0
    small = c.empty((4 << 20,), "float32", device="cuda")
    big = c.empty((16 << 20,), "float32", device="cuda")
    assert small.arena is not big.arena
    sv = small.torch()
    sv.fill_(1)
    torch.cuda.synchronize()
    assert (c.relu(small[:8]).numpy() == 1).all()
    serial = small.arena.serial
    assert serial in c._maps
    n = c.torch_views()
    del sv, small, big
    c.empty((1,), device="cuda")                 # the allocator drains
    assert serial not in c._maps and c.torch_views() == n - 1
    # a view outlives its opd Tensor: the block is not reused under it
    a = np.arange(1 << 20, dtype=np.float32)
    v = c.from_numpy(a, device="cuda").torch()
    for _ in range(4):
        c.from_numpy(np.zeros(1 << 20, np.float32), device="cuda")
    assert torch.equal(v.cpu(), torch.from_numpy(a))
    # the client closes with a view alive: the view stays valid (the
    # imported handle holds the memory after the daemon frees its side)
    c.close()
    assert c.torch_views() == 0
    assert torch.equal(v.cpu(), torch.from_numpy(a))
    v.add_(1)
    torch.cuda.synchronize()
    assert torch.equal(v.cpu(), torch.from_numpy(a + 1))
    del v                                        # unmapped now, no crash
    torch.cuda.synchronize()


def test_high_priority_client(daemon):
    with opd.connect(daemon.socket, priority="high") as c:
        x = c.from_numpy(np.ones((4, 8), np.float32), device="cuda")
        assert np.allclose(c.softmax(x).numpy(), 1 / 8)


# ---- torch CUDA tensors in place (CUDA IPC import) -----------------------------

def test_torch_inputs_and_outputs(c):
    for i, dt in enumerate(FLOATS):
        x = randn((64, 1000), dt, 10 + i, scale=2.0)
        y = torch.empty_like(x)
        r = c.softmax(x, out=y)
        assert r is y                                   # written in place
        check(y, torch.softmax(x.double(), -1), dt)
        z = c.softmax(x)                                # new output: a device tensor
        assert isinstance(z, opd.Tensor) and z.device == DEV
        check(z, torch.softmax(x.double(), -1), dt)


def test_torch_in_place_and_views(c):
    x = randn((10, 300), "float32", 20, scale=3.0)
    orig = x.clone()
    assert c.relu(x, out=x) is x
    torch.cuda.synchronize()
    assert torch.equal(x, orig.relu())
    big = randn((50, 64), "float32", 21)
    out = torch.zeros((50, 64), device=DEV)
    c.gelu(big[7:19], out=out[30:42])                   # storage offsets both sides
    assert torch.equal(out[:30], torch.zeros((30, 64), device=DEV))
    assert torch.equal(out[42:], torch.zeros((8, 64), device=DEV))
    check(out[30:42], F.gelu(big[7:19].double()), "float32")
    a, b = randn((8, 16, 32), "bfloat16", 22), randn((32, 8), "bfloat16", 23)
    m = torch.empty((8, 16, 8), device=DEV, dtype=torch.bfloat16)
    c.matmul(a, b, out=m)                               # torch in, torch out
    check(m, torch.matmul(a.double(), b.double()), "bfloat16", TOL_WIDE)
    d = c.empty((8, 16, 8), "bfloat16", device="cuda")
    c.matmul(a, b, out=d)                               # torch in, opd out
    check(d, torch.matmul(a.double(), b.double()), "bfloat16", TOL_WIDE)


def test_torch_written_input_ordering(c):
    # torch writes on its stream, then opd reads: the package synchronizes
    x = torch.empty((4096, 1024), device=DEV)
    y = torch.empty_like(x)
    for v in (1.0, 2.0, 3.0):
        x.fill_(v)
        c.relu(x, out=y)
        assert torch.all(y == v)


def test_import_cache(c):
    x = randn((32, 32), "float32", 30)
    y = torch.empty_like(x)
    for _ in range(50):
        c.relu(x, out=y)
    assert len(c._imports) == 2
    tensors = [randn((8, 8), "float32", 40 + i) for i in range(100)]
    for t in tensors:                                   # more storages than the cache
        c.relu(t, out=t)
    assert len(c._imports) <= sys.modules["opd.client"].IMPORT_CACHE
    torch.cuda.synchronize()
    for i, t in enumerate(tensors):
        assert torch.equal(t, randn((8, 8), "float32", 40 + i).relu())
    c.forget_imports()
    assert len(c._imports) == 0
    c.relu(x, out=y)                                    # imports again


# ---- publish / attach -----------------------------------------------------------

def test_publish_attach_same_process(daemon, c):
    w = c.from_numpy(np.arange(1024, dtype=np.float32), device="cuda")
    pub = c.publish("w-same-%d" % os.getpid(), w)
    assert pub.device == DEV and pub.arena is not w.arena
    with opd.connect(daemon.socket) as b:
        a = b.attach("w-same-%d" % os.getpid())
        assert a.readonly and a.device == DEV and a.shape == (1024,) and a.dtype == "float32"
        x = b.full((1024,), 2.0, device="cuda")
        assert (b.mul(x, a).numpy() == 2 * np.arange(1024)).all()
        with pytest.raises(opd.BadArgumentError) as e:
            b.relu(x, out=a)
        assert e.value.name == "EREADONLY"
        assert (a.numpy() == np.arange(1024)).all()     # unchanged
    c.unpublish("w-same-%d" % os.getpid())


def test_publish_attach_across_processes(daemon, c):
    name = "weights-%d" % os.getpid()
    a = np.linspace(-1, 1, 48, dtype=np.float32).reshape(6, 8)
    c.publish(name, c.from_numpy(a, device="cuda"))
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_gpu_workers.attach_and_read, args=(daemon.socket, name, q))
    p.start()
    try:
        r = q.get(timeout=120)
    finally:
        p.join(30)
        if p.is_alive():
            p.kill()
    assert r[0] == "ok", r
    _, dev, shape, seen, doubled, ro = r
    assert dev == DEV and tuple(shape) == (6, 8)
    assert np.array_equal(np.array(seen, np.float32), a)
    assert np.allclose(doubled, 2 * a)
    assert ro == "EREADONLY"
    c.unpublish(name)
    with pytest.raises(opd.BadArgumentError) as e:
        c.attach(name)
    assert e.value.name == "ENOENT"


# ---- 16 processes at once -------------------------------------------------------

def test_16_workers_device_softmax(daemon):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_gpu_workers.device_softmax,
                         args=(daemon.socket, i, 50, q)) for i in range(16)]
    for p in procs:
        p.start()
    try:
        results = [q.get(timeout=180) for _ in procs]
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    bad = [r for r in results if r[0] != "ok"]
    assert not bad, bad
    assert len({r[1] for r in results}) == 16


# ---- bad input --------------------------------------------------------------------

def test_no_such_device(c, gpu_daemon):
    if "cuda:7" in gpu_daemon:
        pytest.skip("this machine has a cuda:7")
    with pytest.raises(opd.BackendError) as e:
        c.empty((4,), device="cuda:7")
    assert e.value.name == "EDEVICE"
    x = c.from_numpy(np.ones(4, np.float32), device="cuda")
    with pytest.raises(opd.BackendError) as e:
        c.relu(x, device="cuda:7")
    assert e.value.name == "EDEVICE"
    with pytest.raises(opd.BackendError) as e:
        c.relu(x, device="cpu")                          # a device tensor on the cpu
    assert e.value.name == "EDEVICE"


def test_import_past_the_allocation(c):
    x = torch.empty((1000,), device=DEV)
    info = x.untyped_storage()._share_cuda_()
    with pytest.raises(opd.BadArgumentError) as e:
        c.import_cuda(info[1], info[3], 1 << 40, DEV)
    assert e.value.name == "EBOUNDS"
    t = c.import_cuda(info[1], info[3], info[2], DEV)   # the true range imports
    assert t.device == DEV and t.shape == (info[2],)


def test_import_bad_handle(c):
    with pytest.raises(opd.BadArgumentError) as e:
        c.import_cuda(bytes(range(64)), 0, 256, DEV)
    assert e.value.name == "EINVAL"


def test_attach_unknown_name(c):
    with pytest.raises(opd.BadArgumentError) as e:
        c.attach("no-such-name-%d" % os.getpid())
    assert e.value.name == "ENOENT"


def test_device_tensor_of_another_connection(daemon, c):
    x = c.from_numpy(np.ones(4, np.float32), device="cuda")
    with opd.connect(daemon.socket) as b:
        with pytest.raises(opd.BadArgumentError) as e:
            b.relu(x)
        assert e.value.name == "EARENA"
        assert (b.relu(x.cpu()).numpy() == 1).all()       # a host copy travels


def test_device_memory_exhausted(c):
    with pytest.raises(opd.LimitError):
        c.empty((1 << 42,), "uint8", device="cuda")      # 4 TiB
    x = c.from_numpy(np.ones(4, np.float32), device="cuda")
    assert (c.relu(x).numpy() == 1).all()                # still serving
