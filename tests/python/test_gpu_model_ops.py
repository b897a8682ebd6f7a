"""The ops a small model needs on the GPU through the daemon, against torch
in float64, every float dtype the daemon lists: linear (every act, bias or
not: cuBLASLt's epilogues and the activation kernel; batch 1 and batched),
gru_cell (torch.nn.GRUCell's formula, 0 or 2 biases), silu / sigmoid /
tanh, sub / div with broadcasting. Skips as test_gpu.py does (its helpers
and its module-level skip are reused)."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from test_gpu import (TOL_WIDE, check, dtypes_of, gpu_daemon, randn,  # noqa: E402,F401
                      to_dev)

F = torch.nn.functional
ACTS = {"none": lambda y: y, "relu": F.relu, "gelu": F.gelu,
        "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"), "silu": F.silu}


@pytest.mark.parametrize("xs,n", [((1, 256), 512), ((1, 512), 1), ((37, 53), 29),
                                  ((2, 5, 64), 96), ((256, 512), 384)])
def test_linear(c, xs, n):
    k = xs[-1]
    for i, dt in enumerate(dtypes_of(c, "linear")):
        xt, wt = randn(xs, dt, 1200 + i), randn((n, k), dt, 1300 + i, scale=k ** -0.5)
        bt = randn((n,), dt, 1400 + i)
        x, w, b = to_dev(c, xt), to_dev(c, wt), to_dev(c, bt)
        for act, f in ACTS.items():
            check(c.linear(x, w, b, act=act),
                  f(F.linear(xt.double(), wt.double(), bt.double())), dt, TOL_WIDE)
            check(c.linear(x, w, act=act), f(F.linear(xt.double(), wt.double())), dt, TOL_WIDE)


def gru_ref(x, h, wi, wh, bi, bh):
    gi, gh = F.linear(x, wi, bi), F.linear(h, wh, bh)
    ir, iz, i_n = gi.chunk(3, -1)
    hr, hz, hn = gh.chunk(3, -1)
    r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
    n = torch.tanh(i_n + r * hn)
    return (1 - z) * n + z * h


@pytest.mark.parametrize("b,i,hid", [(1, 256, 128), (4, 7, 5), (33, 40, 65)])
def test_gru_cell(c, b, i, hid):
    for j, dt in enumerate(dtypes_of(c, "gru_cell")):
        ts = [randn((b, i), dt, 1500 + j), randn((b, hid), dt, 1600 + j),
              randn((3 * hid, i), dt, 1700 + j, scale=0.3), randn((3 * hid, hid), dt, 1800 + j,
                                                                  scale=0.3),
              randn((3 * hid,), dt, 1900 + j, scale=0.5), randn((3 * hid,), dt, 2000 + j,
                                                               scale=0.5)]
        ds = [to_dev(c, t) for t in ts]
        d64 = [t.double() for t in ts]
        check(c.gru_cell(*ds), gru_ref(*d64), dt, TOL_WIDE)
        check(c.gru_cell(*ds[:4]), gru_ref(*d64[:4], None, None), dt, TOL_WIDE)


@pytest.mark.parametrize("sa,sb", [((7, 13), (13,)), ((13,), (7, 13)), ((3, 1, 5), (1, 4, 5)),
                                   ((64, 1000), ())])
def test_elementwise(c, sa, sb):
    for i, dt in enumerate(dtypes_of(c, "sub")):
        at, bt = randn(sa, dt, 2100 + i, scale=3.0), randn(sb, dt, 2200 + i).abs() + 1
        a, b = to_dev(c, at), to_dev(c, bt)
        a64, b64 = at.double(), bt.double()
        check(c.sub(a, b), a64 - b64, dt)
        check(c.div(a, b), a64 / b64, dt)
        check(c.silu(a), F.silu(a64), dt)
        check(c.sigmoid(a), torch.sigmoid(a64), dt)
        check(c.tanh(a), torch.tanh(a64), dt)
