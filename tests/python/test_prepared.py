"""Prepared runs (Client.prepare): the same results as run(), new input
values seen on every call, fixed outputs, submit(), errors at call time,
and a rebuild after fork (a new connection has new arena ids)."""

import numpy as np
import pytest

import opd
from _forks import in_child


def test_prepared_run_sees_new_inputs_and_reuses_its_outputs(c, rng):
    x = c.from_numpy(rng.standard_normal((4, 32)).astype(np.float32))
    y = c.empty((4, 32), "float32")
    relu = c.prepare("relu", x, out=y)
    for _ in range(5):
        x.numpy()[:] = rng.standard_normal((4, 32))
        assert relu() is y
        np.testing.assert_array_equal(y.numpy(), np.maximum(x.numpy(), 0))
    relu.close()
    relu.close()                                    # twice is harmless


def test_prepared_allocates_outputs_once_and_takes_attrs(c, rng):
    a = rng.standard_normal((3, 16)).astype(np.float32)
    x = c.from_numpy(a)
    sm = c.prepare("softmax", x, dim=-1)
    first = sm()
    assert sm() is first                            # the same Tensor each call
    e = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(first.numpy(), e / e.sum(axis=1, keepdims=True),
                               rtol=1e-5, atol=1e-7)


def test_prepared_submit_pipelines(c):
    x = c.from_numpy(np.arange(64, dtype=np.float32))
    y = c.empty((64,), "float32")
    cp = c.prepare("copy", x, out=y)
    reqs = [cp.submit() for _ in range(20)]
    assert all(r.wait() is y for r in reqs)
    np.testing.assert_array_equal(y.numpy(), x.numpy())


def test_prepared_errors_come_from_each_call(c):
    x = c.from_numpy(np.ones(16, np.float32))
    bad = c.prepare("relu", x, out=c.empty((15,), "float32"))
    for _ in range(2):
        with pytest.raises(opd.BadArgumentError, match="relu"):
            bad()
    c.ping()                                        # the connection is fine
    with pytest.raises(opd.OpdError):
        c.prepare("no_such_op", x)                  # output inference fails


def test_prepared_run_is_rebuilt_in_a_forked_child(c):
    x = c.from_numpy(np.arange(-4, 4, dtype=np.float32))
    y = c.empty((8,), "float32")
    relu = c.prepare("relu", x, out=y)
    relu()

    def child():
        x.numpy()[:] = -x.numpy()                   # shared with the parent
        relu()                                      # a new session here
        return y.tolist() == [4, 3, 2, 1, 0, 0, 0, 0]
    assert in_child(child)
    relu()                                          # the parent's still works
    assert y.tolist() == [4, 3, 2, 1, 0, 0, 0, 0]
