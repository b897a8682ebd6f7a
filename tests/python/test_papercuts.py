"""The papercuts a port from torch meets first, each fixed and kept so:
an array given as out= is a clear EINVAL (never a TypeError from the
runner); a tensor or arena too big is a LimitError naming the size and
the limit (never an OverflowError from os.ftruncate); numpy and bool
scalars are operands as Python numbers are (torch's rule: the tensor's
float dtype); a scalar opd cannot hold is refused naming the scalar."""
import numpy as np
import pytest

import opd
from opd import errors, memory


def refused(cls, code, f, *words):
    with pytest.raises(cls) as e:
        f()
    assert e.value.name == code, e.value
    for w in words:
        assert w in e.value.message, e.value
    return e.value


def test_an_array_as_out_is_a_clear_error(c):
    for out in (np.zeros((), np.float32), np.zeros(3, np.float32), [0.0]):
        refused(opd.BadArgumentError, "EINVAL",
                lambda: c.softmax(np.float32(3), out=out), "an output must be")
    assert c.softmax(np.float32(3)).numpy() == 1.0      # the scalar alone runs


def test_sizes_over_the_limits_are_limit_errors(c):
    for shape, dtype in (((2 ** 62,), "float32"), ((2 ** 64,), "int8"),
                         ((2 ** 40, 2 ** 40), "float16")):
        refused(opd.LimitError, "ELIMIT", lambda: c.empty(shape, dtype),
                "empty", str(shape[0]), "bytes", "max_arena_bytes")
    # an arena no file can hold, whatever the daemon's limit
    e = refused(opd.LimitError, "ELIMIT", lambda: memory.create_arena(2 ** 64),
                str(2 ** 64), str(2 ** 63 - 1))
    assert isinstance(e, errors.OpdError)


def test_numpy_and_bool_scalars_are_operands(c):
    x = c.from_numpy(np.arange(4, dtype=np.float32))
    want = np.arange(4, dtype=np.float32)
    for s in (np.float64(2.5), np.float32(2.5), np.int64(2), np.int32(-3),
              np.bool_(True), True, 2, 2.5):
        y = c.add(x, s).numpy()
        assert y.dtype == np.float32, (s, y.dtype)
        np.testing.assert_allclose(y, want + float(s))
        np.testing.assert_allclose(c.mul(s, x).numpy(), want * float(s))
    # a numpy scalar alone, or beside integer tensors, keeps its own dtype
    # (a 0-d array)
    assert c.sum(np.int64(3)).numpy().dtype == np.int64
    xi = c.from_numpy(np.arange(4, dtype=np.int64))
    cond = np.array([True, False, True, False])
    assert c.where(cond, xi, np.int64(-1)).numpy().tolist() == [0, -1, 2, -1]


def test_a_scalar_opd_cannot_hold_is_refused_naming_it(c):
    x = c.from_numpy(np.ones(3, np.float32))
    for s in (1 + 2j, np.complex64(1j)):
        refused(opd.BadArgumentError, "EDTYPE", lambda: c.add(x, s),
                "add", "input 1", "complex scalar")
