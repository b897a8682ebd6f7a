"""The ops a small model needs against torch on the CPU, through the real
daemon: linear (every act, bias or not, batch 1 and batched, 1-D and 3-D
x; the trading MLP 256 -> 512 -> 512 -> 1 layer by layer), gru_cell
(torch.nn.GRUCell with its own weights, with and without biases, batched
and unbatched), silu / sigmoid / tanh, sub / div with broadcasting, and
the daemon's messages for bad shapes and a bad act."""
import numpy as np
import pytest

import opd

torch = pytest.importorskip("torch", reason="torch is not installed")
F = torch.nn.functional

ACTS = {
    "none": lambda y: y,
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"),
    "silu": F.silu,
}


def close(got, want, atol=1e-5, rtol=1e-4):
    got = got.numpy() if isinstance(got, opd.Tensor) else np.asarray(got)
    np.testing.assert_allclose(got, want.detach().numpy(), atol=atol, rtol=rtol)


def t(shape, gen, scale=1.0):
    return torch.randn(*shape, generator=gen) * scale


@pytest.mark.parametrize("act", sorted(ACTS))
@pytest.mark.parametrize("xs,n", [((1, 256), 512), ((1, 512), 1), ((5, 33), 19),
                                  ((2, 3, 17), 9), ((17,), 4)])
def test_linear_matches_torch(c, act, xs, n):
    g = torch.Generator().manual_seed(len(xs) * 100 + n)
    k = xs[-1]
    x, w, b = t(xs, g), t((n, k), g, k ** -0.5), t((n,), g)
    for bias in (b, None):
        want = ACTS[act](F.linear(x, w, bias))
        args = (x.numpy(), w.numpy()) + ((bias.numpy(),) if bias is not None else ())
        y = c.linear(*args, act=act)
        assert y.shape == tuple(want.shape)
        close(y, want)


def test_trading_mlp_layer_by_layer(c):
    """256 -> 512 -> 512 -> 1 at batch 1, each layer's output the next
    one's input in the daemon's memory, against torch.nn.Sequential."""
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                              torch.nn.Linear(512, 512), torch.nn.GELU(),
                              torch.nn.Linear(512, 1))
    layers = [(m.weight.detach().numpy(), m.bias.detach().numpy())
              for m in mlp if isinstance(m, torch.nn.Linear)]
    params = [(c.from_numpy(w), c.from_numpy(b)) for w, b in layers]
    x = torch.randn(1, 256)
    h = c.from_numpy(x.numpy())
    for (w, b), act in zip(params, ["relu", "gelu", "none"]):
        h = c.linear(h, w, b, act=act)
    assert h.shape == (1, 1)
    close(h, mlp(x), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("batch,i,hid", [(1, 256, 128), (4, 7, 5), (1, 1, 1), (3, 40, 133),
                                         (None, 9, 11)])
@pytest.mark.parametrize("bias", [True, False])
def test_gru_cell_matches_torch(c, batch, i, hid, bias):
    torch.manual_seed(i * 7 + hid)
    cell = torch.nn.GRUCell(i, hid, bias=bias)
    xs, hs = ((batch, i), (batch, hid)) if batch else ((i,), (hid,))
    x, h = torch.randn(*xs), torch.randn(*hs)
    want = cell(x, h)
    ws = [cell.weight_ih, cell.weight_hh] + ([cell.bias_ih, cell.bias_hh] if bias else [])
    got = c.gru_cell(x.numpy(), h.numpy(), *[p.detach().numpy() for p in ws])
    assert got.shape == tuple(want.shape)
    close(got, want)
    if bias:   # b_ih alone: b_hh zero
        got = c.gru_cell(x.numpy(), h.numpy(), *[p.detach().numpy() for p in ws[:3]])
        with torch.no_grad():
            cell.bias_hh.zero_()
        close(got, cell(x, h))


def test_gru_cell_steps_a_sequence(c):
    """h fed back through the daemon for 20 steps, as a GRU runs."""
    torch.manual_seed(3)
    cell = torch.nn.GRUCell(16, 32)
    ws = [c.from_numpy(p.detach().numpy()) for p in
          (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)]
    xs = torch.randn(20, 2, 16)
    h_t, h_o = torch.zeros(2, 32), c.from_numpy(np.zeros((2, 32), np.float32))
    for x in xs:
        h_t = cell(x, h_t)
        h_o = c.gru_cell(x.numpy(), h_o, *ws)
    close(h_o, h_t, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 5), (4, 1023), (2, 3, 17)])
def test_silu_sigmoid_tanh_match_torch(c, shape):
    x = torch.randn(*shape) * 4
    xn = x.numpy()
    close(c.silu(xn), F.silu(x), atol=1e-6, rtol=1e-5)
    close(c.sigmoid(xn), torch.sigmoid(x), atol=1e-6, rtol=1e-5)
    close(c.tanh(xn), torch.tanh(x), atol=1e-6, rtol=1e-5)
    y = c.from_numpy(xn)
    c.tanh(y, out=y)                      # in place
    close(y, torch.tanh(x), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("sa,sb", [((5,), (5,)), ((3, 4), (4,)), ((4,), (3, 4)),
                                   ((2, 1, 7), (3, 1)), ((1,), (6, 6)), ((6, 6), ()),
                                   ((), (6, 6)), ((4, 1, 3), (1, 5, 3))])
def test_sub_div_match_torch(c, sa, sb):
    g = torch.Generator().manual_seed(len(sa) + 10 * len(sb))
    a, b = torch.randn(sa, generator=g), torch.randn(sb, generator=g) + 3
    close(c.sub(a.numpy(), b.numpy()), a - b, atol=0, rtol=0)
    close(c.div(a.numpy(), b.numpy()), a / b, atol=0, rtol=0)


def test_bad_shapes_name_both_shapes(c):
    B = opd.BadArgumentError
    with pytest.raises(B, match=r"linear: input 0 \(x\) has shape \[3,4\] and input 1 "
                       r"\(weight\) has shape \[5,6\]"):
        c.linear(c.empty((3, 4)), c.empty((5, 6)))
    with pytest.raises(B, match=r"linear: input 1 \(weight\) has shape \[5,4\] and input 2 "
                       r"\(bias\) has shape \[7\]"):
        c.linear(c.empty((3, 4)), c.empty((5, 4)), c.empty(7))
    with pytest.raises(B, match="act"):
        c.linear(c.empty((3, 4)), c.empty((5, 4)), act="tanh")
    with pytest.raises(B, match=r"gru_cell: input 0 \(x\) has shape \[2,3\] and input 1 "
                       r"\(h\) has shape \[4,5\]"):
        c.gru_cell(c.empty((2, 3)), c.empty((4, 5)), c.empty((15, 3)), c.empty((15, 5)))
    with pytest.raises(B, match=r"gru_cell: input 2 \(w_ih\) has shape \[12,3\]"):
        c.gru_cell(c.empty((2, 3)), c.empty((2, 5)), c.empty((12, 3)), c.empty((15, 5)))
    with pytest.raises(B, match=r"sub: input 0 \(a\) has shape \[8,10\] and input 1 \(b\) "
                       r"has shape \[12\]"):
        c.sub(c.empty((8, 10)), c.empty(12))


def test_new_ops_are_listed_with_their_schema(c):
    ops = c.ops()
    for name in ("linear", "gru_cell", "silu", "sigmoid", "tanh", "sub", "div"):
        assert name in ops and name in dir(c)
    lin = ops["linear"]
    assert [i["name"] for i in lin["inputs"]] == ["x", "weight", "bias"]
    assert lin["min_inputs"] == 2
    act = [a for a in lin["attrs"] if a["name"] == "act"][0]
    assert act["default"] == "none"
    assert ops["gru_cell"]["min_inputs"] == 4 and ops["gru_cell"]["max_inputs"] == 6
    assert c.infer("linear", c.empty((2, 3, 8)), c.empty((5, 8))) == [("float32", (2, 3, 5))]
    assert c.infer("gru_cell", c.empty(3), c.empty(4), c.empty((12, 3)),
                   c.empty((12, 4))) == [("float32", (4,))]
