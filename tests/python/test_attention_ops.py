"""The attention family through a real daemon on the CPU: sdpa against a
numpy reference (torch 1.13 has no F.scaled_dot_product_attention):
causal (Tq = Tk, Tq < Tk, Tq > Tk: top-left like torch's is_causal), bool
and float masks broadcast from several shapes, a fully masked row (zeros,
as torch >= 2.5), Tq != Tk, Dv != D, rank 3 and 4, scale, GPT-2's shapes
(D = 64, B = 1..4, T = 16..256); rope against transformers'
apply_rotary_pos_emb written in torch (cos/sin (T, D) and (B, 1, T, D));
swiglu against F.silu(a) * b; bad input naming what was wrong; and the
three ops as nodes of one graph, equal to the same ops run one by one bit
for bit."""
import numpy as np
import pytest

import opd

torch = pytest.importorskip("torch", reason="torch is not installed")
F = torch.nn.functional


def sdpa_ref(q, k, v, mask=None, causal=False, scale=None):
    """F.scaled_dot_product_attention in float64 numpy (fully masked rows
    give zeros, as torch >= 2.5)."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    scale = scale or 1.0 / np.sqrt(q.shape[-1])
    s = q @ np.swapaxes(k, -1, -2) * scale
    tq, tk = s.shape[-2:]
    if causal:
        s = np.where(np.tril(np.ones((tq, tk), bool)), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    m = s.max(-1, keepdims=True) if tk else np.zeros(s.shape[:-1] + (1,))
    m = np.where(np.isneginf(m), 0.0, m)
    p = np.exp(s - m)
    l = p.sum(-1, keepdims=True)
    return np.where(l > 0, (p @ v) / np.where(l > 0, l, 1), 0.0)


def rnd(rng, *shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def qkv(rng, lead, tq, tk, d, dv=None):
    return (rnd(rng, *lead, tq, d), rnd(rng, *lead, tk, d),
            rnd(rng, *lead, tk, dv or d, lo=-1, hi=1))


def close(got, want, atol=2e-6, rtol=1e-5):
    np.testing.assert_allclose(np.asarray(got.numpy()), want, atol=atol, rtol=rtol)


@pytest.mark.parametrize("b,t", [(1, 16), (2, 64), (4, 128), (1, 256)])
def test_sdpa_gpt2_causal(c, rng, b, t):
    q, k, v = qkv(rng, (b, 12), t, t, 64)
    close(c.sdpa(q, k, v, causal=True), sdpa_ref(q, k, v, causal=True))


@pytest.mark.parametrize("tq,tk", [(7, 19), (19, 7), (33, 33), (1, 40), (40, 1)])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_lengths_and_rank3(c, rng, tq, tk, causal):
    q, k, v = qkv(rng, (2, 3), tq, tk, 16, 24)
    close(c.sdpa(q, k, v, causal=causal), sdpa_ref(q, k, v, causal=causal))
    q3, k3, v3 = (a.reshape(6, *a.shape[2:]) for a in (q, k, v))
    y3 = c.sdpa(q3, k3, v3, causal=causal)
    assert y3.shape == (6, tq, 24)
    close(y3, sdpa_ref(q3, k3, v3, causal=causal))


@pytest.mark.parametrize("mshape", [(2, 3, 9, 21), (9, 21), (21,), (1, 1, 9, 21),
                                    (2, 1, 1, 21), (3, 1, 21)])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_masks(c, rng, mshape, kind):
    q, k, v = qkv(rng, (2, 3), 9, 21, 8)
    if kind == "bool":
        mask = rng.uniform(size=mshape) > 0.3
    else:
        mask = rnd(rng, *mshape, lo=-3, hi=1)
        mask[rng.uniform(size=mshape) < 0.2] = -np.inf
    close(c.sdpa(q, k, v, mask), sdpa_ref(q, k, v, mask))


def test_sdpa_fully_masked_rows_are_zeros_and_scale(c, rng):
    q, k, v = qkv(rng, (1, 2), 4, 6, 8)
    mask = np.ones((4, 6), bool)
    mask[2] = False
    y = c.sdpa(q, k, v, mask).numpy()
    assert (y[:, :, 2] == 0).all()
    close(c.sdpa(q, k, v, mask), sdpa_ref(q, k, v, mask))
    fm = np.where(mask, 0, -np.inf).astype(np.float32)
    close(c.sdpa(q, k, v, fm), sdpa_ref(q, k, v, mask))
    close(c.sdpa(q, k, v, scale=0.3), sdpa_ref(q, k, v, scale=0.3))
    q3, k3, v3 = qkv(rng, (2,), 5, 0, 4)        # Tk = 0: zeros
    assert (c.sdpa(q3, k3, v3).numpy() == 0).all()


def test_sdpa_bad_input(c, rng):
    q, k, v = qkv(rng, (1, 2), 5, 7, 8)
    with pytest.raises(opd.BadArgumentError, match=r"head dims differ.*8 vs 6"):
        c.sdpa(q, k[..., :6].copy(), v)
    with pytest.raises(opd.BadArgumentError, match=r"key lengths differ"):
        c.sdpa(q, k, v[:, :, :6].copy())
    with pytest.raises(opd.BadArgumentError, match=r"rank 4 \(B, H, T, D\) or rank 3"):
        c.sdpa(q[0, 0], k[0, 0], v[0, 0])
    with pytest.raises(opd.BadArgumentError, match=r"mask has shape \[5,6\].*\[1,2,5,7\]"):
        c.sdpa(q, k, v, np.ones((5, 6), bool))
    with pytest.raises(opd.BadArgumentError, match=r"causal=true with a mask"):
        c.sdpa(q, k, v, np.ones((5, 7), bool), causal=True)
    with pytest.raises(opd.BadArgumentError, match=r"input 3 \(mask\) has dtype int32"):
        c.sdpa(q, k, v, np.ones((5, 7), np.int32))
    with pytest.raises(opd.BadArgumentError, match=r"k is float16 but q is float32"):
        c.sdpa(q, k.astype(np.float16), v)


def rope_torch(x, cos, sin):
    """transformers' apply_rotary_pos_emb: x * cos + rotate_half(x) * sin."""
    h = x.shape[-1] // 2
    rot = torch.cat((-x[..., h:], x[..., :h]), dim=-1)
    return x * cos + rot * sin


@pytest.mark.parametrize("xs,cs", [((2, 4, 16, 64), (16, 64)),
                                   ((2, 4, 16, 64), (2, 1, 16, 64)),
                                   ((3, 9, 10), (9, 10))])
def test_rope_matches_torch(c, rng, xs, cs):
    x, cos, sin = rnd(rng, *xs, lo=-3, hi=3), rnd(rng, *cs), rnd(rng, *cs)
    want = rope_torch(*(torch.from_numpy(a) for a in (x, cos, sin)))
    close(c.rope(x, cos, sin), want.numpy())


def test_rope_bad_input(c, rng):
    x = rnd(rng, 2, 5, 7)
    with pytest.raises(opd.BadArgumentError, match=r"D even"):
        c.rope(x, rnd(rng, 5, 7), rnd(rng, 5, 7))
    x = rnd(rng, 2, 5, 8)
    with pytest.raises(opd.BadArgumentError, match=r"do not broadcast to x's shape \[2,5,8\]"):
        c.rope(x, rnd(rng, 6, 8), rnd(rng, 6, 8))
    with pytest.raises(opd.BadArgumentError, match=r"cos \[5,8\] and sin \[5,4\]"):
        c.rope(x, rnd(rng, 5, 8), rnd(rng, 5, 4))


@pytest.mark.parametrize("xs", [(4, 6144), (2, 3, 22), (2,)])
def test_swiglu_matches_torch(c, rng, xs):
    x = rnd(rng, *xs, lo=-8, hi=8)
    a, b = torch.from_numpy(x).chunk(2, dim=-1)
    y = c.swiglu(x)
    assert y.shape == xs[:-1] + (xs[-1] // 2,)
    close(y, (F.silu(a) * b).numpy(), atol=1e-5)


def test_swiglu_bad_input(c, rng):
    with pytest.raises(opd.BadArgumentError, match=r"\[3,7\].*even"):
        c.swiglu(rnd(rng, 3, 7))


def test_attention_ops_in_a_graph(c, rng):
    """rope on q and k, causal sdpa, swiglu of its output; and sdpa with a
    bool mask constant: the graph equals the ops one by one bit for bit."""
    B, H, T, D = 2, 4, 24, 16
    cos, sin = rnd(rng, T, D), rnd(rng, T, D)
    mask = rng.uniform(size=(T, T)) > 0.4
    with c.graph(name="attn") as g:
        q, k, v = (g.input(n, (B, H, T, D)) for n in "qkv")
        gc, gs = g.const(cos), g.const(sin)
        o = g.sdpa(g.rope(q, gc, gs), g.rope(k, gc, gs), v, causal=True)
        g.output(g.swiglu(o), g.sdpa(q, k, v, g.const(mask)))
    for _ in range(2):
        qa, ka, va = qkv(rng, (B, H), T, T, D)
        y, ym = g.run(qa, ka, va)
        ref = c.swiglu(c.sdpa(c.rope(qa, cos, sin), c.rope(ka, cos, sin), va,
                              causal=True))
        assert y.numpy().tobytes() == ref.numpy().tobytes()
        assert ym.numpy().tobytes() == c.sdpa(qa, ka, va, mask).numpy().tobytes()
        close(ym, sdpa_ref(qa, ka, va, mask))
        qt, kt = (rope_torch(*(torch.from_numpy(a) for a in (x, cos, sin))).numpy()
                  for x in (qa, ka))
        att = torch.from_numpy(sdpa_ref(qt, kt, va, causal=True))
        a, b = att.chunk(2, dim=-1)
        close(y, (F.silu(a) * b).numpy(), atol=1e-5)
    g.close()


def _on_device(c):
    if not c.devices():
        pytest.skip("the daemon has no CUDA device")
    return lambda a: c.from_numpy(a).to("cuda")


@pytest.mark.parametrize("dt,tol", [(np.float32, (2e-5, 1e-4)), (np.float16, (2e-3, 1e-2))])
def test_the_cuda_kernels_against_numpy(c, rng, dt, tol):
    dev = _on_device(c)
    q, k, v = (a.astype(dt) for a in qkv(rng, (2, 12), 64, 64, 64))
    dq, dk, dv = dev(q), dev(k), dev(v)
    close(c.sdpa(dq, dk, dv, causal=True), sdpa_ref(q, k, v, causal=True), *tol)
    q2, k2, v2 = (a.astype(dt) for a in qkv(rng, (3,), 19, 45, 32, 40))
    bm = rng.uniform(size=(19, 45)) > 0.3
    fm = np.where(bm, rnd(rng, 19, 45), -np.inf).astype(dt)
    for m in (bm, fm):
        close(c.sdpa(dev(q2), dev(k2), dev(v2), dev(m)), sdpa_ref(q2, k2, v2, m), *tol)
    x, cos, sin = (a.astype(dt) for a in (rnd(rng, 2, 4, 16, 64), rnd(rng, 16, 64),
                                           rnd(rng, 16, 64)))
    want = rope_torch(*(torch.from_numpy(a.astype(np.float32)) for a in (x, cos, sin)))
    close(c.rope(dev(x), dev(cos), dev(sin)), want.numpy(), *tol)
    h = rnd(rng, 3, 5, 128, lo=-4, hi=4).astype(dt)
    a, b = torch.from_numpy(h.astype(np.float32)).chunk(2, dim=-1)
    close(c.swiglu(dev(h)), (F.silu(a) * b).numpy(), *tol)


def test_a_device_graph_equals_the_ops_on_the_device(c, rng):
    """The graph of test_attention_ops_in_a_graph on the GPU (the kernels
    captured into a CUDA graph): equal to the ops one by one on the
    device bit for bit, and to numpy within float tolerance."""
    dev = _on_device(c)
    B, H, T, D = 2, 4, 24, 16
    cos, sin = rnd(rng, T, D), rnd(rng, T, D)
    mask = rng.uniform(size=(T, T)) > 0.4
    with c.graph(device="cuda", name="attn-gpu") as g:
        q, k, v = (g.input(n, (B, H, T, D)) for n in "qkv")
        gc, gs = g.const(cos), g.const(sin)
        o = g.sdpa(g.rope(q, gc, gs), g.rope(k, gc, gs), v, causal=True)
        g.output(g.sdpa(o, k, v, g.const(mask)))
    dc, ds, dm = dev(cos), dev(sin), dev(mask)
    for _ in range(2):
        qa, ka, va = qkv(rng, (B, H), T, T, D)
        dq, dk, dv = dev(qa), dev(ka), dev(va)
        y = g.run(dq, dk, dv)
        o = c.sdpa(c.rope(dq, dc, ds), c.rope(dk, dc, ds), dv, causal=True)
        assert y.numpy().tobytes() == c.sdpa(o, dk, dv, dm).numpy().tobytes()
        qt, kt = (rope_torch(*(torch.from_numpy(a) for a in (x, cos, sin))).numpy()
                  for x in (qa, ka))
        close(y, sdpa_ref(sdpa_ref(qt, kt, va, causal=True), ka, va, mask), 2e-5, 1e-4)
    g.close()
