"""torch.ops.opd.* on float64 and bfloat16 CPU tensors against torch's own
ops: float64 to double precision, bfloat16 within its rounding of a
float32 computation (the CPU backend computes halves in float32, as
torch's CPU kernels do); opcheck (schema, fake against real, PT2
tracing) on float64 and bfloat16 calls."""
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

try:
    import opd.torch as ot  # noqa: F401
except ImportError as e:           # torch < 2.4
    pytest.skip(str(e), allow_module_level=True)

TOL = {torch.float64: dict(rtol=1e-12, atol=1e-12),
       torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}


def cases(dt):
    """[(op, args, kwargs, torch reference)] in dtype dt on the CPU."""
    g = torch.Generator().manual_seed(1)

    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64).to(dt)

    x, w, b, m = r(4, 6, 8), r(8), r(8), r(8, 5)
    lw = r(3, 8)
    return [
        ("relu", (x,), {}, torch.relu(x)),
        ("gelu", (x,), {}, F.gelu(x)),
        ("silu", (x,), {}, F.silu(x)),
        ("sigmoid", (x,), {}, torch.sigmoid(x)),
        ("add", (x, b), {"alpha": 0.5}, torch.add(x, b, alpha=0.5)),
        ("mul", (x, w), {}, x * w),
        ("softmax", (x,), {"dim": 1}, torch.softmax(x, 1)),
        ("log_softmax", (x,), {"dim": -1}, torch.log_softmax(x, -1)),
        ("layernorm", (x, w, b), {}, F.layer_norm(x, (8,), w, b)),
        ("rmsnorm", (x, w), {"eps": 1e-6}, F.rms_norm(x, (8,), w, eps=1e-6)),
        ("sum", (x,), {"dims": [0, 2]}, x.sum((0, 2))),
        ("mean", (x,), {"dims": [-1], "keepdim": True}, x.mean(-1, keepdim=True)),
        ("amax", (x,), {"dims": [1]}, x.amax(1)),
        ("matmul", (x, m), {}, x @ m),
        ("linear", (x, lw, None), {}, F.linear(x, lw)),
    ]


@pytest.mark.parametrize("dt", [torch.float64, torch.bfloat16])
def test_float_dtypes_against_torch(tc, dt):
    for name, args, kwargs, want in cases(dt):
        got = getattr(torch.ops.opd, name)(*args, **kwargs)
        assert got.dtype == dt, name
        if dt == torch.bfloat16:     # torch's bf16 reference rounds in between
            want = want.float()
            got = got.float()
        torch.testing.assert_close(got, want, msg=name, **TOL[dt])


@pytest.mark.parametrize("dt", [torch.float64, torch.bfloat16])
def test_opcheck(tc, dt):
    x = torch.randn(3, 16, dtype=dt)
    torch.library.opcheck(torch.ops.opd.softmax.default, (x,), {"dim": 0})
    torch.library.opcheck(torch.ops.opd.linear.default,
                          (x, torch.randn(4, 16, dtype=dt), None), {})


def test_softmax_dtype_float64(tc):
    x = torch.randn(5, 7)
    got = torch.ops.opd.softmax(x, dim=-1, dtype="float64")
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, torch.softmax(x, -1, dtype=torch.float64),
                               rtol=1e-12, atol=1e-12)


def test_int_input_still_refused(tc):
    import opd
    with pytest.raises(opd.BadArgumentError, match=r"softmax: input 0 \(x\) has dtype "
                       r"int32, expected float32 or float16 or bfloat16 or float64"):
        torch.ops.opd.softmax(torch.zeros(3, dtype=torch.int32))
