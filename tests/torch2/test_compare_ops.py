"""The compare ops (eq, ne, lt, le, gt, ge) and integer add / sub / mul
as torch.ops.opd.* (torch >= 2.4): they pass torch.library.opcheck
(schema, fake implementation against the real one) on CPU tensors (and
CUDA ones where the daemon has a GPU), their results equal torch's, and
mixed dtypes are refused naming both."""
import pytest

torch = pytest.importorskip("torch")

import opd  # noqa: E402

try:
    import opd.torch  # noqa: F401
except ImportError as e:  # torch < 2.4
    pytest.skip(str(e), allow_module_level=True)

COMPARES = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le,
            "gt": torch.gt, "ge": torch.ge}


def samples(dev):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, generator=g)
    x[0, 0] = float("nan")
    y = torch.randn(5, generator=g)
    i = torch.randint(-3, 3, (2, 1, 4), generator=g)
    j = torch.randint(-3, 3, (3, 4), generator=g)
    b = torch.rand(4, generator=g) < 0.5
    pairs = [(x, y), (x.to(torch.float16), y.to(torch.float16)), (i, j),
             (i.to(torch.int8), j.to(torch.int8)), (b, b.flip(0))]
    return [(a.to(dev), c.to(dev)) for a, c in pairs]


def test_opcheck_and_results_of_the_compare_ops(tc, devs):
    for dev in devs:
        for a, b in samples(dev):
            for name, fn in COMPARES.items():
                op = getattr(torch.ops.opd, name).default
                torch.library.opcheck(op, (a, b))
                got = op(a, b)
                assert got.dtype == torch.bool
                torch.testing.assert_close(got, fn(a, b), msg=name)


def test_integer_arithmetic_opcheck(tc, devs):
    for dev in devs:
        _, _, (i, j), (i8, j8), _ = samples(dev)
        for name, fn in (("add", torch.add), ("sub", torch.sub), ("mul", torch.mul)):
            for a, b in ((i, j), (i8 * 50, j8 * 40)):          # int8: wraps
                op = getattr(torch.ops.opd, name).default
                torch.library.opcheck(op, (a, b))
                torch.testing.assert_close(op(a, b), fn(a, b), rtol=0, atol=0)


def test_mixed_dtypes_are_refused_naming_both(tc):
    with pytest.raises(opd.OpdError, match="lt: a is float32 but b is int64"):
        torch.ops.opd.lt(torch.zeros(3), torch.zeros(3, dtype=torch.int64))
