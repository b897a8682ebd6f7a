"""The asynchronous-run interface on any daemon (CI has no GPU; the GPU
side is test_gpu_async.py): synchronize() on an idle and a busy client,
host runs answered when done (their outputs readable at once, nothing
left to settle), submit() and prepared runs the same."""
import numpy as np

import opd


def test_synchronize_idle_and_after_runs(c):
    c.synchronize()
    x = c.from_numpy(np.linspace(-1, 1, 4096, dtype=np.float32))
    reqs = [c.submit("relu", x) for _ in range(50)]
    c.synchronize()
    for r in reqs:
        np.testing.assert_array_equal(r.wait().numpy(), np.maximum(x.numpy(), 0))
    assert not c._unsynced


def test_host_runs_complete_before_they_return(c):
    x = c.from_numpy(np.arange(-8, 8, dtype=np.float32))
    y = c.empty_like(x)
    c.run("relu", x, out=y)
    assert not c._unsynced               # nothing in flight to settle
    np.testing.assert_array_equal(np.asarray(y), np.maximum(np.arange(-8, 8), 0))
    p = c.prepare("relu", x, out=y)
    y.numpy()[:] = 5
    p()
    np.testing.assert_array_equal(np.asarray(y), np.maximum(np.arange(-8, 8), 0))
    assert not c._unsynced


def test_synchronize_on_a_closed_client_is_an_error(daemon):
    c = opd.connect(daemon.socket)
    c.close()
    try:
        c.synchronize()
    except opd.OpdError as e:
        assert "closed" in str(e)
    else:
        raise AssertionError("synchronize on a closed client did not raise")
