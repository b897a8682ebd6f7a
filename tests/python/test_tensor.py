"""Tensors: creation, zero-copy numpy and DLPack views, views, pickling."""
import gc
import pickle

import numpy as np
import pytest

import opd


def test_create_and_properties(c):
    x = c.empty((8, 1024), dtype="float32")
    assert x.shape == (8, 1024) and x.dtype == "float32" and x.nbytes == 8 * 1024 * 4
    assert x.ndim == 2 and x.size == 8192 and len(x) == 8 and x.itemsize == 4
    assert x.data_ptr() % 64 == 0
    for dt in (np.float32, np.dtype("int64"), "uint8", np.bool_, bool, 9):
        t = c.zeros((3,), dt)
        assert t.dtype == opd.dtype_name(dt)
        assert not t.numpy().any()
    assert c.full((2, 2), 7, "int32").tolist() == [[7, 7], [7, 7]]
    assert c.ones(3).tolist() == [1.0, 1.0, 1.0]
    assert c.empty(5).shape == (5,) and c.empty(()).shape == ()
    assert c.empty((0, 4)).nbytes == 0
    assert c.full(2, 1.5, "float16").numpy().tolist() == [1.5, 1.5]
    with pytest.raises(opd.BadArgumentError) as e:
        c.empty(3, "complex64")
    assert e.value.name == "EDTYPE"
    with pytest.raises(opd.BadArgumentError):
        c.empty((-1, 3))


def test_numpy_view_is_zero_copy(c):
    x = c.zeros((4, 5))
    v = x.numpy()
    v[1, 2] = 3.5
    assert np.asarray(x)[1, 2] == 3.5
    assert v.__array_interface__["data"][0] == x.data_ptr()
    y = c.relu(x)
    assert y.numpy()[1, 2] == 3.5
    # the numpy view keeps the tensor's memory alive
    ptr = x.data_ptr()
    del x, y
    gc.collect()
    z = c.empty((4, 5))
    assert z.data_ptr() != ptr and v[1, 2] == 3.5


def test_from_numpy_copies(c):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = c.from_numpy(a)
    a[0, 0] = 100
    assert t.numpy()[0, 0] == 0
    t2 = c.from_numpy(a.T)            # non-contiguous source
    assert t2.is_contiguous() and (t2.numpy() == a.T).all()
    assert c.as_tensor(t) is t
    assert c.from_numpy([[1, 2], [3, 4]]).dtype == "int64"


def test_views(c):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = c.from_numpy(a)
    assert (t[1].numpy() == a[1]).all() and (t[-1].numpy() == a[-1]).all()
    assert (t[1:3].numpy() == a[1:3]).all() and t[1:3].is_contiguous()
    assert t[5:].shape == (0, 6)
    assert (t.reshape(3, -1).numpy() == a.reshape(3, 8)).all()
    assert (t.T.numpy() == a.T).all() and not t.T.is_contiguous()
    with pytest.raises(IndexError):
        t[4]
    with pytest.raises(TypeError):
        t["x"]
    with pytest.raises(opd.BadArgumentError):
        t.T.reshape(24)
    with pytest.raises(opd.BadArgumentError):
        t.reshape(5, 5)
    assert t.tobytes() == a.tobytes()
    t.copy_from_bytes(np.ones((4, 6), np.float32).tobytes())
    assert t.numpy().sum() == 24


def test_dlpack(c):
    x = c.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert x.__dlpack_device__() == (1, 0)
    v = np.from_dlpack(x)
    assert v.shape == (2, 3) and v.dtype == np.float32
    assert v.__array_interface__["data"][0] == x.data_ptr()
    x.numpy()[0, 0] = 42          # numpy marks DLPack imports read-only
    assert v[0, 0] == 42
    # strided view and int64, offset inside the arena
    i = c.from_numpy(np.arange(12, dtype=np.int64).reshape(3, 4))
    np.testing.assert_array_equal(np.from_dlpack(i.T), np.arange(12).reshape(3, 4).T)
    np.testing.assert_array_equal(np.from_dlpack(i[1:]), np.arange(4, 12).reshape(2, 4))
    from opd import _dlpack
    n = len(_dlpack._live)
    cap = x.__dlpack__()   # never consumed: the capsule's destructor frees it
    assert len(_dlpack._live) == n + 1
    del cap
    assert len(_dlpack._live) == n
    del v
    gc.collect()
    assert len(_dlpack._live) == 0


def test_torch_interop(c):
    torch = pytest.importorskip("torch", reason="torch is not installed "
                                "(Debian's python3-torch): torch interop not tested")
    x = c.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    tt = torch.from_dlpack(x)
    tt[0, 0] = 7
    assert x.numpy()[0, 0] == 7 and tt.data_ptr() == x.data_ptr()


def test_pickle_same_process(c):
    x = c.from_numpy(np.arange(10, dtype=np.float32))
    y = pickle.loads(pickle.dumps(x[2:5]))
    assert y.arena is x.arena and y.tolist() == [2, 3, 4]
    ref = opd.share_reference(x)
    assert ref[0] > 0 and len(ref) == 8 and len(pickle.dumps(x)) < 300
    assert opd.from_reference(ref).tolist() == x.tolist()


def test_bfloat16(c):
    t = c.zeros((2,), "bfloat16")
    assert t.nbytes == 4 and t.numpy().dtype.itemsize == 2
