"""The compare ops (eq, ne, lt, le, gt, ge) and integer add / sub / mul
through a real daemon on the CPU, against numpy: bool results over every
number dtype and bool, broadcast, NaN unequal to everything; integer
arithmetic wrapping as numpy's (and torch's) does, alpha an integer; the
daemon's messages for mixed dtypes, a fractional alpha and integer div."""
import numpy as np
import pytest

import opd

NP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
      "gt": np.greater, "ge": np.greater_equal}
DTYPES = ["float32", "float16", "float64", "int8", "uint8", "int32", "int64", "bool"]


def vals(rng, shape, dtype):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    return rng.integers(0 if dtype == "uint8" else -4, 4, size=shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_compare_ops_equal_numpy(c, rng, dtype):
    a, b = vals(rng, (3, 1, 7), dtype), vals(rng, (5, 7), dtype)
    if dtype.startswith("float"):
        a[0, 0, 0] = np.nan
    for name, fn in NP.items():
        got = getattr(c, name)(a, b).numpy()
        assert got.dtype == np.bool_ and got.shape == (3, 5, 7)
        np.testing.assert_array_equal(got, fn(a, b), err_msg=name)


@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8", "bool"])
def test_compare_ops_read_views_as_they_are(c, rng, dtype):
    """A transposed operand, a step slice and a row broadcast: the CPU
    kernels read the strides (cpu_strided), no copy is made or counted."""
    a, b = vals(rng, (40, 24), dtype), vals(rng, (24, 40), dtype)
    ta, tb = c.from_numpy(a), c.from_numpy(b)
    before = c.stats()["strided"]["copies"]
    for name, fn in NP.items():
        got = c.run(name, ta, tb.T).numpy()
        np.testing.assert_array_equal(got, fn(a, b.T), err_msg=name + " transpose")
        got = c.run(name, ta[:, ::2], ta[:, 1::2]).numpy()
        np.testing.assert_array_equal(got, fn(a[:, ::2], a[:, 1::2]), err_msg=name + " step")
        got = c.run(name, ta, ta[3:4]).numpy()
        np.testing.assert_array_equal(got, fn(a, a[3:4]), err_msg=name + " row")
    assert c.stats()["strided"]["copies"] == before


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64"])
def test_integer_add_sub_mul_wrap_as_numpy(c, rng, dtype):
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, size=(4, 9), dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, size=(9,), dtype=dtype, endpoint=True)
    three = np.array(3, dtype=dtype)
    with np.errstate(over="ignore"):
        cases = (("add", {}, a + b), ("sub", {}, a - b), ("mul", {}, a * b),
                 ("add", {"alpha": 3}, a + b * three), ("sub", {"alpha": -3}, a + b * three))
    for name, kw, want in cases:
        got = getattr(c, name)(a, b, **kw).numpy()
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, want, err_msg="%s %s" % (name, kw))


def test_refusals_name_what_was_wrong(c):
    for call, msg in (
            (lambda: c.lt(np.zeros(3, np.float32), np.zeros(3, np.int64)),
             "lt: a is float32 but b is int64"),
            (lambda: c.add(np.zeros(3, np.int32), np.zeros(3, np.int32), alpha=0.5),
             "alpha = 0.5 is not an integer, which int32 tensors need"),
            (lambda: c.div(np.ones(3, np.int32), np.ones(3, np.int32)), "int32")):
        with pytest.raises(opd.OpdError, match=msg):
            call()
