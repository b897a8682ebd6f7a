"""conv2d as F.conv2d through the Client: groups (depthwise included),
unbatched (C, H, W) input, padding="same" / "valid" (the daemon's
padding_mode; the client maps a str padding to it), padding as [top,
bottom, left, right]; against a numpy reference (refs.conv2d per group on
an explicitly padded input), inside a graph too, and bad input's errors."""
import numpy as np
import pytest

import opd
import refs


def rand(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


def ref(x, w, b=None, stride=1, pads=(0, 0, 0, 0), dilation=1, groups=1):
    """Grouped conv2d: x padded by pads (top, bottom, left, right), then
    refs.conv2d on each group's channels."""
    unbatched = x.ndim == 3
    if unbatched:
        x = x[None]
    t, bo, le, ri = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (t, bo), (le, ri)))
    cg, kg = x.shape[1] // groups, w.shape[0] // groups
    y = np.concatenate([refs.conv2d(xp[:, g * cg:(g + 1) * cg], w[g * kg:(g + 1) * kg],
                                    None if b is None else b[g * kg:(g + 1) * kg],
                                    stride, 0, dilation) for g in range(groups)], axis=1)
    return y[0] if unbatched else y


def same_pads(w, dilation):
    d = (dilation, dilation) if isinstance(dilation, int) else dilation
    th, tw = d[0] * (w.shape[2] - 1), d[1] * (w.shape[3] - 1)
    return (th // 2, th - th // 2, tw // 2, tw - tw // 2)


@pytest.mark.parametrize("xs,ws,groups,stride,padding,dilation,bias", [
    ((2, 4, 9, 8), (6, 2, 3, 3), 2, 1, 1, 1, True),
    ((1, 8, 12, 12), (8, 1, 3, 3), 8, 1, 1, 1, True),        # depthwise
    ((2, 6, 11, 10), (12, 1, 3, 3), 6, 2, 1, 1, False),      # x2, stride 2
    ((1, 6, 10, 9), (3, 2, 3, 2), 3, (1, 2), (2, 1), (2, 1), True),
    ((7, 8, 9), (7, 1, 5, 5), 7, 1, 2, 1, True),             # unbatched
    ((4, 6, 6), (5, 4, 3, 3), 1, 1, 0, 1, False),            # unbatched, groups 1
])
def test_grouped(c, rng, xs, ws, groups, stride, padding, dilation, bias):
    x, w = rand(rng, xs), rand(rng, ws)
    b = rand(rng, (ws[0],)) if bias else None
    got = c.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation,
                   groups=groups)
    p = (padding, padding) if isinstance(padding, int) else padding
    want = ref(x, w, b, stride, (p[0], p[0], p[1], p[1]), dilation, groups)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("xs,ws,groups,dilation", [
    ((2, 3, 8, 7), (4, 3, 3, 3), 1, 1),
    ((1, 2, 6, 5), (3, 2, 2, 2), 1, 1),                      # even: asymmetric
    ((1, 4, 9, 9), (4, 1, 4, 3), 4, (2, 1)),
    ((4, 7, 6), (4, 2, 2, 4), 2, 1),                         # unbatched
])
def test_same_and_valid(c, rng, xs, ws, groups, dilation):
    x, w, b = rand(rng, xs), rand(rng, ws), rand(rng, (ws[0],))
    got = c.conv2d(x, w, b, padding="same", dilation=dilation, groups=groups)
    assert got.shape[-2:] == xs[-2:]
    want = ref(x, w, b, 1, same_pads(w, dilation), dilation, groups)
    np.testing.assert_allclose(got.numpy(), want, atol=1e-4, rtol=1e-4)
    also = c.conv2d(x, w, b, padding_mode="same", dilation=dilation, groups=groups)
    assert also.numpy().tobytes() == got.numpy().tobytes()
    got = c.conv2d(x, w, b, padding="valid", dilation=dilation, groups=groups)
    want = ref(x, w, b, 1, (0, 0, 0, 0), dilation, groups)
    np.testing.assert_allclose(got.numpy(), want, atol=1e-4, rtol=1e-4)


def test_four_int_padding(c, rng):
    x, w = rand(rng, (1, 3, 7, 8)), rand(rng, (2, 3, 3, 2))
    got = c.conv2d(x, w, padding=[0, 2, 1, 3], stride=2)
    want = ref(x, w, None, 2, (0, 2, 1, 3))
    assert got.shape == want.shape == (1, 2, 4, 6)
    np.testing.assert_allclose(got.numpy(), want, atol=1e-4, rtol=1e-4)


def test_matches_torch(c, rng):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x, w, b = rand(rng, (2, 6, 10, 11)), rand(rng, (6, 1, 4, 4)), rand(rng, (6,))
    tx, tw, tb = (torch.from_numpy(a) for a in (x, w, b))
    for kw in ({"padding": "same"}, {"padding": "valid"}, {"padding": (1, 2), "stride": 2},
               {"padding": "same", "dilation": 2}):
        got = c.conv2d(x, w, b, groups=6, **kw).numpy()
        np.testing.assert_allclose(got, F.conv2d(tx, tw, tb, groups=6, **kw).numpy(),
                                   atol=1e-4, rtol=1e-4)
    got = c.conv2d(x[0], w, b, groups=6, padding="same").numpy()
    np.testing.assert_allclose(got, F.conv2d(tx[0], tw, tb, groups=6, padding="same").numpy(),
                               atol=1e-4, rtol=1e-4)


def test_in_a_graph(c, rng):
    """A depthwise 'same' conv then a pointwise one, as graph nodes."""
    dw, pw = rand(rng, (8, 1, 3, 3)), rand(rng, (16, 8, 1, 1))
    with c.graph(name="dwsep") as g:
        x = g.input("x", (2, 8, 12, 12))
        g.output(g.conv2d(g.conv2d(x, g.const(dw), groups=8, padding="same"),
                          g.const(pw)))
    xa = rand(rng, (2, 8, 12, 12))
    y = g.run(xa)
    want = c.conv2d(c.conv2d(xa, dw, groups=8, padding="same"), pw)
    assert y.numpy().tobytes() == want.numpy().tobytes()
    g.close()


@pytest.mark.parametrize("xs,ws,kw,words", [
    ((1, 6, 8, 8), (4, 3, 3, 3), {"groups": 4}, ["6 channels", "groups=4"]),
    ((1, 6, 8, 8), (4, 2, 3, 3), {"groups": 3}, ["4 output channels", "groups=3"]),
    ((1, 6, 8, 8), (4, 2, 3, 3), {"groups": 2}, ["6 / 2 = 3"]),
    ((1, 6, 8, 8), (4, 6, 3, 3), {"groups": 0}, ["groups=0"]),
    ((1, 6, 8, 8), (4, 6, 3, 3), {"padding": "same", "stride": 2}, ["same", "stride 1"]),
    ((1, 6, 8, 8), (4, 6, 3, 3), {"padding": "full"}, ["padding_mode", "full"]),
    ((1, 6, 8, 8), (4, 6, 3, 3), {"padding_mode": "same", "padding": 1},
     ["padding must be 0"]),
    ((6, 8), (4, 6, 3, 3), {}, ["(C, H, W)"]),
])
def test_errors(c, rng, xs, ws, kw, words):
    with pytest.raises(opd.OpdError) as e:
        c.conv2d(rand(rng, xs), rand(rng, ws), **kw)
    for wd in words:
        assert wd in str(e.value), (wd, str(e.value))
