"""torch.ops.opd.sdpa / rope / swiglu (torch >= 2.4; with an older torch
every test skips): torch.library.opcheck on several call forms (causal,
a bool and a float mask, rank 3, an explicit scale) and results against
torch's own F.scaled_dot_product_attention (is_causal with Tq = Tk, Tq <
Tk and Tq > Tk, masks broadcast from (Tq, Tk) and (B, 1, 1, Tk), a fully
masked row, Dv != D, GPT-2's D = 64 shapes), transformers' rotary
embedding and F.silu(a) * b; a torch.compile(fullgraph=True) trace through
the fake implementations; bad input raises the daemon's message."""
import pytest

torch = pytest.importorskip("torch")

import opd  # noqa: E402

try:
    import opd.torch as ot
except ImportError as e:  # torch < 2.4
    pytest.skip(str(e), allow_module_level=True)

F = torch.nn.functional


def rope_torch(x, cos, sin):
    h = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin


def calls(dev):
    """(op name, args, kwargs) of valid calls of the three ops on dev."""
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g).to(dev)

    q, k, v = r(2, 3, 5, 8), r(2, 3, 7, 8), r(2, 3, 7, 4)
    bmask = (torch.rand(5, 7, generator=g) > 0.3).to(dev)
    return [
        ("sdpa", (q, k, v), {}),
        ("sdpa", (q, k, v), {"causal": True}),
        ("sdpa", (q, k, v, bmask), {}),
        ("sdpa", (q, k, v, r(2, 1, 1, 7)), {"scale": 0.5}),
        ("sdpa", (r(6, 5, 8), r(6, 5, 8), r(6, 5, 8)), {"causal": True}),
        ("rope", (r(2, 3, 5, 8), r(5, 8), r(5, 8)), {}),
        ("rope", (r(2, 3, 5, 8), r(2, 1, 5, 8), r(2, 1, 5, 8)), {}),
        ("swiglu", (r(4, 3, 10),), {}),
    ]


def test_opcheck(tc, devs):
    ran = 0
    for dev in devs:
        for name, args, kwargs in calls(dev):
            torch.library.opcheck(getattr(torch.ops.opd, name).default, args, kwargs)
            ran += 1
    assert ran >= 8


@pytest.mark.parametrize("tq,tk", [(16, 16), (64, 64), (7, 19), (19, 7)])
def test_sdpa_matches_torch_causal(tc, tq, tk, devs):
    for dev in devs:
        q, k, v = (torch.randn(2, 12, t, 64, device=dev) for t in (tq, tk, tk))
        torch.testing.assert_close(torch.ops.opd.sdpa(q, k, v, causal=True),
                                   F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                   atol=1e-5, rtol=1e-4)


def test_sdpa_matches_torch_masks(tc, devs):
    for dev in devs:
        q, k, v = torch.randn(2, 3, 9, 16), torch.randn(2, 3, 21, 16), torch.randn(2, 3, 21, 24)
        q, k, v = q.to(dev), k.to(dev), v.to(dev)
        for shape in [(9, 21), (2, 1, 1, 21), (2, 3, 9, 21)]:
            b = torch.rand(*shape, device=dev) > 0.3
            f = torch.randn(*shape, device=dev).masked_fill(~b, float("-inf"))
            for m in (b, f):
                torch.testing.assert_close(torch.ops.opd.sdpa(q, k, v, m),
                                           F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                                           atol=1e-5, rtol=1e-4)
        dead = torch.ones(9, 21, dtype=torch.bool, device=dev)
        dead[4] = False                               # a fully masked row: zeros
        y = torch.ops.opd.sdpa(q, k, v, dead, scale=0.2)
        torch.testing.assert_close(
            y, F.scaled_dot_product_attention(q, k, v, attn_mask=dead, scale=0.2),
            atol=1e-5, rtol=1e-4)
        assert (y[:, :, 4] == 0).all()


def test_rope_and_swiglu_match_torch(tc, devs):
    for dev in devs:
        x, cos, sin = (torch.randn(*s, device=dev) for s in ((2, 4, 16, 64), (16, 64), (16, 64)))
        torch.testing.assert_close(torch.ops.opd.rope(x, cos, sin), rope_torch(x, cos, sin))
        h = torch.randn(3, 5, 128, device=dev)
        a, b = h.chunk(2, dim=-1)
        torch.testing.assert_close(torch.ops.opd.swiglu(h), F.silu(a) * b)


def test_compile_fullgraph_traces_the_ops(tc, devs):
    def f(q, k, v, cos, sin):
        o = torch.ops.opd.sdpa(torch.ops.opd.rope(q, cos, sin),
                               torch.ops.opd.rope(k, cos, sin), v, causal=True)
        return torch.ops.opd.swiglu(o)

    g = torch.compile(f, fullgraph=True, backend="aot_eager")
    for dev in devs:
        args = [torch.randn(*s, device=dev)
                for s in ((1, 2, 8, 16), (1, 2, 8, 16), (1, 2, 8, 16), (8, 16), (8, 16))]
        torch.testing.assert_close(g(*args), f(*args))


def test_bad_input_raises_the_daemons_message(tc):
    q = torch.randn(1, 2, 5, 8)
    with pytest.raises(opd.BadArgumentError, match="sdpa: causal=true with a mask"):
        torch.ops.opd.sdpa(q, q, q, torch.ones(5, 5, dtype=torch.bool), causal=True)
    with pytest.raises(opd.BadArgumentError, match=r"sdpa: q \[1,2,5,8\] and k \[1,2,5,6\]"):
        torch.ops.opd.sdpa(q, q[..., :6], q)
    with pytest.raises(opd.BadArgumentError, match="swiglu: x has shape"):
        torch.ops.opd.swiglu(torch.randn(3, 7))
