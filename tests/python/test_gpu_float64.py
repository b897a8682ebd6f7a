"""float64 on the GPU through the daemon, against torch in float64: the
element-wise, row-wise, reduce and matmul/linear ops on device tensors
(computed in double: within 1e-10), softmax's dtype= to and from float64,
and a float64 host array run with device="cuda" (staged). Skips as
test_gpu.py does (its helpers and its module-level skip are reused)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from test_gpu import check, gpu_daemon, randn, to_dev  # noqa: E402,F401

F = torch.nn.functional
TOL64 = {"float64": (1e-10, 1e-10), "float32": (1e-6, 1e-5)}


def test_float64_ops_on_device(c):
    xt, bt = randn((37, 129), "float64", 1), randn((129,), "float64", 2)
    wt, mt = randn((33, 129), "float64", 3), randn((129, 17), "float64", 4)
    lbt = randn((33,), "float64", 7)
    x, b, w, m, lb = (to_dev(c, t) for t in (xt, bt, wt, mt, lbt))
    cases = [
        (c.relu(x), F.relu(xt)), (c.gelu(x), F.gelu(xt)),
        (c.gelu(x, approximate="tanh"), F.gelu(xt, approximate="tanh")),
        (c.silu(x), F.silu(xt)), (c.sigmoid(x), torch.sigmoid(xt)),
        (c.tanh(x), torch.tanh(xt)),
        (c.add(x, b), xt + bt), (c.sub(x, b, alpha=0.1), xt - 0.1 * bt),
        (c.div(x, b), xt / bt), (c.mul(x, b), xt * bt),
        (c.softmax(x), torch.softmax(xt, -1)), (c.softmax(x, dim=0), torch.softmax(xt, 0)),
        (c.log_softmax(x, dim=0), torch.log_softmax(xt, 0)),
        (c.layernorm(x, b, b), F.layer_norm(xt, (129,), bt, bt)),
        (c.rmsnorm(x, b, eps=1e-6), F.rms_norm(xt, (129,), bt, eps=1e-6)),
        (c.sum(x, dims=[1]), xt.sum(1)), (c.mean(x), xt.mean()),
        (c.amax(x, dims=[0], keepdim=True), xt.amax(0, keepdim=True)),
        (c.matmul(x, m), xt @ mt),
        (c.linear(x, w, lb, act="gelu"), F.gelu(F.linear(xt, wt, lbt))),
    ]
    for got, want in cases:
        assert got.dtype == "float64"
        check(got, want, "float64", TOL64)


def test_softmax_dtype_to_and_from_float64(c):
    xt = randn((5, 300), "float32", 5)
    y = c.softmax(to_dev(c, xt), dtype="float64")
    assert y.dtype == "float64"
    check(y, torch.softmax(xt.double(), -1), "float64", TOL64)
    x64 = randn((5, 300), "float64", 6)
    y = c.softmax(to_dev(c, x64), dim=0, dtype="float32")
    assert y.dtype == "float32"
    check(y, torch.softmax(x64.float(), 0), "float32", TOL64)


def test_float64_host_array_on_cuda(c):
    a = np.random.default_rng(7).standard_normal((64, 96))
    y = c.softmax(a, device="cuda").numpy()
    assert y.dtype == np.float64
    e = np.exp(a - a.max(-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-12)
