"""The run memo (Client.run reusing what it built for the same opd Tensors,
attributes and device): every call still sees the current input values,
and anything that is not the very same objects takes the full path, so a
result is never computed from stale arguments."""
import gc

import numpy as np

from _forks import in_child


def test_a_repeated_run_sees_new_values_and_uses_the_memo(c, rng):
    x = c.from_numpy(rng.standard_normal((4, 32)).astype(np.float32))
    y = c.empty((4, 32), "float32")
    hits = c.stats().get("run_cache_hits", 0)
    for _ in range(6):
        x.numpy()[:] = rng.standard_normal((4, 32))
        assert c.relu(x, out=y) is y
        np.testing.assert_array_equal(y.numpy(), np.maximum(x.numpy(), 0))
    assert ("relu", id(y)) in c._run_memo
    # the daemon recognized the repeated request too (daemon/run/runcache.c)
    assert c.stats()["run_cache_hits"] - hits >= 5


def test_other_attrs_device_or_inputs_are_not_taken_from_the_memo(c, rng):
    a = (rng.standard_normal((3, 8)) * 3).astype(np.float32)
    x = c.from_numpy(a)
    x2 = c.from_numpy(a * 2)
    y = c.empty((3, 8), "float32")
    exact, tanh = {}, {}
    for v in (a, a * 2):                           # the references, once
        c.gelu(c.from_numpy(v), out=y, approximate="none")
        exact[id(v) if v is a else 2] = y.numpy().copy()
        c.gelu(c.from_numpy(v), out=y, approximate="tanh")
        tanh[id(v) if v is a else 2] = y.numpy().copy()
    assert not np.array_equal(exact[id(a)], tanh[id(a)])
    for _ in range(3):
        c.gelu(x, out=y, approximate="none")
        np.testing.assert_array_equal(y.numpy(), exact[id(a)])
        c.gelu(x, out=y, approximate="tanh")       # same key, other attrs
        np.testing.assert_array_equal(y.numpy(), tanh[id(a)])
        c.gelu(x2, out=y, approximate="tanh")      # another input
        np.testing.assert_array_equal(y.numpy(), tanh[2])
        c.gelu(x, out=y, approximate="tanh", device="cpu")  # a device named
        np.testing.assert_array_equal(y.numpy(), tanh[id(a)])


def test_numpy_inputs_are_copied_in_on_every_call(c):
    y = c.empty((5,), "float32")
    for k in range(4):
        a = np.arange(5, dtype=np.float32) - k     # a fresh array each time
        c.relu(a, out=y)
        assert y.tolist() == np.maximum(a, 0).tolist()
    a = np.arange(5, dtype=np.float32)
    for k in range(3):                             # the same array, changed
        a[:] = np.arange(5) - 2 * k
        c.relu(a, out=y)
        assert y.tolist() == np.maximum(a, 0).tolist()


def test_a_new_tensor_in_a_dead_ones_place_is_not_confused(c):
    y = c.empty((16,), "float32")
    for k in range(20):
        # a new Tensor each round; CPython may give it the id of the last
        x = c.from_numpy(np.full(16, float(k - 10), dtype=np.float32))
        c.relu(x, out=y)
        assert y.tolist() == [max(k - 10, 0)] * 16
        del x
        gc.collect()


def test_a_forked_child_takes_the_full_path(c):
    x = c.from_numpy(np.arange(-4, 4, dtype=np.float32))
    y = c.empty((8,), "float32")
    c.relu(x, out=y)
    c.relu(x, out=y)

    def child():
        x.numpy()[:] = -x.numpy()                  # shared with the parent
        c.relu(x, out=y)                           # a new session here
        c.relu(x, out=y)
        return y.tolist() == [4, 3, 2, 1, 0, 0, 0, 0]
    assert in_child(child)
    c.relu(x, out=y)                               # the parent's still works
    assert y.tolist() == [4, 3, 2, 1, 0, 0, 0, 0]


def test_a_dropped_output_and_its_successor(c):
    x = c.from_numpy(np.arange(-4, 4, dtype=np.float32))
    for k in range(10):
        y = c.empty((8,), "float32")               # the last y is dropped
        c.relu(x, out=y)
        c.relu(x, out=y)
        assert y.tolist() == [0, 0, 0, 0, 0, 1, 2, 3]
        del y
        gc.collect()                               # its arena is released


def test_an_op_without_outputs_is_memoized_without_out(c):
    for _ in range(3):
        assert c.run("noop") is None
    assert ("noop", id(None)) in c._run_memo
    x = c.from_numpy(np.ones(4, dtype=np.float32))
    assert c.run("noop", x) is None                  # other inputs: full path
    assert c.run("noop") is None


def test_a_mutable_attribute_is_never_taken_from_the_memo(c):
    # conv2d's stride as a list the caller changes between calls
    x = c.from_numpy(np.ones((1, 1, 6, 6), dtype=np.float32))
    w = c.from_numpy(np.ones((1, 1, 3, 3), dtype=np.float32))
    stride = [1, 1]
    y1 = c.empty((1, 1, 4, 4), "float32")
    c.conv2d(x, w, out=y1, stride=stride)
    c.conv2d(x, w, out=y1, stride=stride)
    assert ("conv2d", id(y1)) not in c._run_memo
    stride[0] = stride[1] = 2
    y2 = c.empty((1, 1, 2, 2), "float32")
    c.conv2d(x, w, out=y2, stride=stride)
    assert y2.tolist() == [[[[9.0, 9.0], [9.0, 9.0]]]]
    c.conv2d(x, w, out=y2, stride=(2, 2))          # a tuple is kept
    c.conv2d(x, w, out=y2, stride=(2, 2))
    assert ("conv2d", id(y2)) in c._run_memo
    assert y2.tolist() == [[[[9.0, 9.0], [9.0, 9.0]]]]
