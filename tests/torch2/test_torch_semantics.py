"""torch's semantics in torch.ops.opd.* (opd._torchsem, torch >= 2.4):
Python and numpy scalars as operands of add, sub, mul, div and where;
torch's type promotion of mixed dtypes (torch.result_type); torch's
forms the daemon's attributes cannot hold (an empty dim list, 0-d
tensors, linear's 1-D weight, cat's legacy empty input, sdpa's batch
broadcast). Each result equals torch's own op, dtype included; the fake
implementation gives the real one's dtype and shape; what stays
unsupported is refused naming it."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

try:
    import opd.torch as ot  # noqa: F401
except ImportError as e:  # torch < 2.4
    pytest.skip(str(e), allow_module_level=True)

from opd import errors  # noqa: E402

O = torch.ops.opd
F = torch.nn.functional
REF = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}


def same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", sorted(REF))
def test_scalar_operands_as_torch(tc, op):
    x = torch.randn(3, 4) + 3
    xi = torch.arange(12).reshape(3, 4)
    for b in (2.5, 2, True, np.float32(1.5), np.float64(-2.0), np.int64(3)):
        if op == "sub" and b is True:       # torch refuses it, and so does opd
            with pytest.raises(errors.OpdError, match="bool"):
                O.sub(x, b)
            continue
        same(getattr(O, op)(x, b), REF[op](x, b))
    same(getattr(O, op)(xi, 2.5), REF[op](xi, 2.5))        # int tensor, float scalar
    if op in ("add", "sub"):
        same(getattr(O, op)(x, 2.0, alpha=3), REF[op](x, 2.0, alpha=3))


def test_a_complex_scalar_is_refused_naming_it(tc):
    with pytest.raises(errors.OpdError, match="scalar operand .* complex"):
        O.mul(torch.ones(2), 1 + 2j)


def test_type_promotion_as_torch(tc):
    x = torch.randn(2, 3)
    xi = torch.arange(6).reshape(2, 3)
    d0 = torch.tensor(0.5, dtype=torch.float64)
    same(O.add(xi, x), torch.add(xi, x))                    # int64 + float32
    same(O.mul(x, xi.to(torch.int32)), torch.mul(x, xi.to(torch.int32)))
    same(O.div(xi, x), torch.div(xi, x))
    same(O.sub(x, d0), torch.sub(x, d0))                    # a 0-d float64 stays float32
    same(O.add(x, torch.tensor([True, False, True])), x + torch.tensor([True, False, True]))
    out = torch.empty(2, 3)
    O.add_out(xi, x, out=out)
    same(out, xi + x)


def test_integer_inputs_torch_computes_in_float(tc):
    xi, xb = torch.arange(-3, 3), torch.tensor([True, False, True])
    for t in (xi, xb):
        same(O.sigmoid(t), torch.sigmoid(t))
        same(O.tanh(t), torch.tanh(t))
    same(O.div(xi, xi + 10), torch.div(xi, xi + 10))
    same(O.div(xi, 4), torch.div(xi, 4))
    same(O.div(xb, xi[:3] + 10), torch.div(xb, xi[:3] + 10))
    xi2 = torch.arange(12).reshape(3, 4)
    same(O.softmax(xi2, 1, dtype=torch.float32), torch.softmax(xi2, 1, dtype=torch.float32))
    same(O.log_softmax(xi2, dim=0, dtype="float32"),
         torch.log_softmax(xi2, 0, dtype=torch.float32))


def test_integer_arithmetic_and_refusals_naming_the_dtype(tc):
    """add / sub / mul of integers compute as torch (an int number keeps
    the tensor's dtype, mixed ints promote); ops with no integer kernel
    refuse naming the dtype."""
    xi = torch.arange(6)
    same(O.add(xi, xi), xi + xi)
    same(O.add(xi, 2), xi + 2)
    same(O.sub(xi, xi.to(torch.int32), alpha=3), torch.sub(xi, xi.to(torch.int32), alpha=3))
    same(O.mul(xi.to(torch.uint8), 100), xi.to(torch.uint8) * 100)     # wraps, as torch
    with pytest.raises(errors.OpdError, match="int64"):
        O.relu(xi)


def test_where_scalars_and_promotion(tc):
    cond = torch.tensor([[True, False, True], [False, False, True]])
    x, y = torch.randn(2, 3), torch.randn(3)
    same(O.where(cond, x, 0.0), torch.where(cond, x, 0.0))
    same(O.where(cond, -1.5, y), torch.where(cond, -1.5, y))
    same(O.where(cond, 1.0, 2.0), torch.where(cond, 1.0, 2.0))
    same(O.where(cond, x, torch.arange(3)), torch.where(cond, x, torch.arange(3)))


def test_torch_forms_the_attributes_cannot_hold(tc):
    x = torch.randn(2, 3, 4)
    same(O.sum(x, dims=[]), torch.sum(x, dim=()))
    same(O.amax(x, dims=[]), torch.amax(x, dim=()))
    z = torch.tensor(3.5)
    same(O.permute(z, dims=[]), z.permute(()))
    same(O.reshape(torch.tensor([2.0]), shape=[]), torch.tensor([2.0]).reshape(()))
    same(O.expand(z, shape=[]), z.expand(()))
    w, b = torch.randn(4), torch.tensor(0.25)
    same(O.linear(x, w), F.linear(x, w))
    same(O.linear(x, w, b), F.linear(x, w, b))
    e = torch.empty(0)
    same(O.cat([e, x], dim=1), torch.cat([e, x], 1))
    q, k, v = torch.randn(4, 3, 8), torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)
    same(O.sdpa(q, k, v), F.scaled_dot_product_attention(q, k, v))


def test_fake_implementation_applies_the_same_semantics(tc):
    from torch._subclasses.fake_tensor import FakeTensorMode
    xi, x = torch.arange(6).reshape(2, 3), torch.randn(2, 3)
    real = O.add(xi, x), O.linear(x, torch.randn(3)), O.sum(x, dims=[]), O.mul(x, 2.0)
    with FakeTensorMode() as mode:
        fi, fx = mode.from_tensor(xi), mode.from_tensor(x)
        fake = (O.add(fi, fx), O.linear(fx, mode.from_tensor(torch.randn(3))),
                O.sum(fx, dims=[]), O.mul(fx, 2.0))
    for r, f in zip(real, fake):
        assert (r.dtype, r.shape) == (f.dtype, f.shape)


def test_compile_traces_scalars_and_promotion(tc):
    def f(a, b):
        return O.mul(O.add(a, b), 0.5)
    a, b = torch.arange(6).reshape(2, 3), torch.randn(2, 3)
    got = torch.compile(f, backend="eager", fullgraph=True)(a, b)
    same(got, (a + b) * 0.5)


def test_torch_signatures_of_softmax_and_reductions(tc):
    x = torch.randn(2, 3, 4)
    same(O.softmax(x, 1), torch.softmax(x, 1))
    same(O.softmax(x, 1, dtype=torch.float32), torch.softmax(x, 1, dtype=torch.float32))
    same(O.log_softmax(x, 0), torch.log_softmax(x, 0))
    same(O.sum(x, 1), torch.sum(x, 1))
    same(O.sum(x, (0, 2), True), torch.sum(x, (0, 2), True))
    same(O.mean(x, dim=-1, keepdim=True), torch.mean(x, dim=-1, keepdim=True))
    same(O.amax(x, dim=None), torch.amax(x, dim=()))
    same(O.sum(x, dims=[1]), torch.sum(x, 1))             # opd's own form still
    with pytest.raises(errors.OpdError, match="dtype"):    # what the daemon lacks
        O.softmax(x, 1, dtype=torch.int32)


def test_torch_signatures_of_norms_pools_and_attention(tc):
    x = torch.randn(2, 3, 5, 6)
    w, b = torch.randn(5, 6), torch.randn(5, 6)
    same(O.layernorm(x, (5, 6), w, b, 1e-3), F.layer_norm(x, (5, 6), w, b, 1e-3))
    same(O.layernorm(x, [6]), F.layer_norm(x, [6]))
    same(O.rmsnorm(x, (6,), w[0], eps=1e-4), F.rms_norm(x, (6,), w[0], eps=1e-4))
    same(O.max_pool2d(x, 3, 2, 1), F.max_pool2d(x, 3, 2, 1))
    same(O.max_pool2d(x, kernel_size=2, stride=None, ceil_mode=True),
         F.max_pool2d(x, kernel_size=2, stride=None, ceil_mode=True))
    same(O.adaptive_avg_pool2d(x, (2, 3)), F.adaptive_avg_pool2d(x, (2, 3)))
    same(O.adaptive_avg_pool2d(x, 1), F.adaptive_avg_pool2d(x, 1))
    m, v = torch.randn(3), torch.rand(3) + 0.5
    same(O.batch_norm(x, m, v, None, None, False, 0.1, 1e-3),
         F.batch_norm(x, m, v, None, None, False, 0.1, 1e-3))
    q, k, vv = torch.randn(2, 4, 3, 8), torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)
    mask = torch.rand(3, 6) > 0.3
    same(O.sdpa(q, k, vv, attn_mask=mask), F.scaled_dot_product_attention(q, k, vv, attn_mask=mask))
    same(O.sdpa(q, k, vv, is_causal=True, scale=0.5),
         F.scaled_dot_product_attention(q, k, vv, is_causal=True, scale=0.5))
    for f, what in ((lambda: O.batch_norm(x, m, v, training=True), "training=True"),
                    (lambda: O.sdpa(q, k, vv, dropout_p=0.1), "dropout_p"),
                    (lambda: O.max_pool2d(x, 2, return_indices=True), "return_indices")):
        with pytest.raises(errors.OpdError, match=what + ".* not supported"):
            f()
