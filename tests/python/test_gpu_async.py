"""Asynchronous, stream-ordered runs on the GPU machine, from
Python: torch.ops.opd and Client.run on torch CUDA tensors return without
a CPU sync and are ordered with torch's current stream both ways; inputs
and outputs dropped and their memory reused right after a call (torch's
caching allocator), in loops, against torch; a side stream; empty_cache
right after calls; runs on daemon-owned device tensors return at enqueue
and are settled by a host read, synchronize(), a new torch view or
publish(); a client that exits with runs in flight. Skips without torch,
CUDA, a daemon with a device, or opd.torch (torch < 2.4).
"""
import multiprocessing as mp
import os

import numpy as np
import pytest

import opd

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

DEV = "cuda:0"


@pytest.fixture(scope="module", autouse=True)
def gpu_daemon(daemon):
    with opd.connect(daemon.socket) as c:
        if not c.devices():
            pytest.skip("the daemon under test reports no CUDA device")


def slow(n=4096):
    """A torch result that takes a few ms to compute (a long matmul)."""
    a = torch.randn(n, n, device=DEV)
    return a @ a


def test_torch_ops_ordered_both_ways_without_sync(ops):
    for _ in range(3):
        x = slow()[:64]                 # still being computed
        ref = torch.softmax(x, -1)      # torch's own, same stream
        y = ops.softmax(x)              # opd waits for the matmul, on the GPU
        z = y * 2                       # torch waits for opd, on the GPU
        torch.testing.assert_close(z, ref * 2, rtol=1e-5, atol=1e-6)


def test_drop_and_reuse_in_a_loop(ops):
    refs, outs = [], []
    for k in range(200):
        x = torch.randn(64, 1000 + k % 7, device=DEV)
        refs.append(torch.softmax(x, -1))
        outs.append(ops.softmax(x))
        del x                           # freed at once ...
        torch.full((64, 1007), float("nan"), device=DEV)  # ... and reused
        w = torch.randn(256, device=DEV)
        b = torch.randn(256, device=DEV)
        h = torch.randn(32, 256, device=DEV)
        refs.append(torch.nn.functional.layer_norm(h, (256,), w, b, 1e-5))
        outs.append(ops.layernorm(h, w, b, eps=1e-5))
        del h, w, b
        torch.empty(32 * 256 * 3, device=DEV).fill_(1e30)
    for r, o in zip(refs, outs):
        torch.testing.assert_close(o, r, rtol=1e-4, atol=1e-5)


def test_in_place_and_out_forms_reused_at_once(ops):
    for k in range(100):
        x = torch.randn(4096, device=DEV) - 0.5
        ref = torch.relu(x)
        ops.relu_(x)                    # torch's memory, written in place
        got = x.clone()                 # read on torch's stream after it
        del x
        torch.full((4096,), -7.0, device=DEV)
        torch.testing.assert_close(got, ref)
        o = torch.empty(4096, device=DEV)
        a = torch.randn(4096, device=DEV)
        ops.relu_out(a, out=o)
        torch.testing.assert_close(o, torch.relu(a))


def test_side_stream(ops):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = slow()[:32]
        y = ops.gelu(x, approximate="tanh")
        ref = torch.nn.functional.gelu(x, approximate="tanh")
        d = (y - ref).abs().max()
    s.synchronize()
    assert float(d) < 1e-4


def test_empty_cache_right_after_calls(ops, daemon):
    for _ in range(5):
        x = torch.randn(1 << 20, device=DEV)
        y = ops.relu(x)
        ref = torch.relu(x)
        del x
        torch.cuda.empty_cache()        # cudaFree of the segment now
        z = torch.randn(1 << 20, device=DEV)
        torch.testing.assert_close(y, ref)
        ops.relu_(z)
    torch.cuda.synchronize()
    with opd.connect(daemon.socket) as c:
        assert c.stats()["healthy"]


def test_chain_of_dependent_tiny_ops(ops):
    x = torch.randn(1, 1024, device=DEV)
    ref = x
    y = x
    for _ in range(4):
        y = ops.softmax(y)
        y = ops.gelu(y, approximate="tanh")
        ref = torch.nn.functional.gelu(torch.softmax(ref, -1), approximate="tanh")
    torch.cuda.synchronize()
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-6)


def _c_kernels():
    import opd.torch as ot
    return ot.c_kernels_why() == ""


def test_c_kernels_serve_cuda_calls(ops):
    """torch >= 2.10: libopd's C kernels are the CUDA kernels of the ops
    (client/torch/torchops.c), torch's dispatcher calls them directly."""
    import opd.torch as ot
    if not _c_kernels():
        pytest.skip("torch.ops.opd on CUDA is refused here: %s"
                    % ot.c_kernels_why())
    names = ot.c_kernels()
    for n in ("softmax", "layernorm", "gelu", "relu", "relu_", "conv2d",
              "softmax_out", "noop"):
        assert n in names, (n, names)
    # the same signature twice (a plan hit), then a new one (a miss)
    for shape in ((8, 300), (8, 300), (3, 5, 7)):
        x = torch.randn(*shape, device=DEV)
        torch.testing.assert_close(ops.softmax(x), torch.softmax(x, -1),
                                   rtol=1e-5, atol=1e-6)
    x = torch.randn(2, 8, 16, 16, device=DEV)
    w = torch.randn(4, 8, 3, 3, device=DEV)
    b = torch.randn(4, device=DEV)
    ref = torch.nn.functional.conv2d(x, w, b, stride=2, padding=1)
    got = ops.conv2d(x, w, b, stride=[2, 2], padding=[1, 1])
    torch.testing.assert_close(got, ref, rtol=1e-3, atol=1e-3)
    got = ops.conv2d(x, w, stride=[1, 1], padding=[1, 1])   # bias None
    torch.testing.assert_close(
        got, torch.nn.functional.conv2d(x, w, None, padding=1), rtol=1e-3, atol=1e-3)


def test_non_contiguous_inputs_and_in_place(ops):
    x = torch.randn(300, 64, device=DEV).t()          # not contiguous
    torch.testing.assert_close(ops.softmax(x), torch.softmax(x, -1),
                               rtol=1e-5, atol=1e-6)
    y = torch.randn(128, 64, device=DEV).t() - 0.5
    ref = torch.relu(y)
    ops.relu_(y)                                        # written back
    torch.testing.assert_close(y, ref)
    h = torch.randn(4, 96, device=DEV)
    w, b = torch.randn(96, device=DEV), torch.randn(96, device=DEV)
    torch.testing.assert_close(
        ops.layernorm(h, w, b, eps=1e-5),
        torch.nn.functional.layer_norm(h, (96,), w, b, 1e-5), rtol=1e-4, atol=1e-5)


def test_batch_chain_ordered_with_torch_before_and_after(ops):
    """opd.torch.batch(): a chain of opd ops, the first after torch's
    matmul, torch's work after the block after all of them; intermediates
    dropped at once inside the block and their memory handed out again
    right after it (the batch kept them alive until it joined)."""
    import opd.torch as ot
    for k in range(20):
        x = slow()[:8] * 1e-4            # still being computed
        ref = x
        for _ in range(40):              # past the 64-run self-join twice
            ref = torch.nn.functional.gelu(torch.softmax(ref, -1), approximate="tanh")
        with ot.batch():
            y = x
            for _ in range(40):
                y = ops.softmax(y)       # the previous y dropped here
                y = ops.gelu(y, approximate="tanh")
        z = y * 2                        # after every run of the block
        torch.full((8, 4096 * 4), float("nan"), device=DEV)  # reused memory
        torch.testing.assert_close(z, ref * 2, rtol=1e-5, atol=1e-6)


def test_batch_with_in_place_and_non_contiguous_calls(ops):
    """Calls inside a batch that need torch's own work around them (a
    non-contiguous input: torch copies it; in place on one: copied back)
    join the batch first and are ordered as outside it."""
    import opd.torch as ot
    gelu = torch.nn.functional.gelu
    for k in range(10):
        x = slow()[:64, :64] * 1e-3 - 0.5
        with ot.batch():
            a = ops.softmax(ops.relu(x))
            c = ops.softmax(a.t())       # torch copies a.t() after a's run
            ops.relu_(c)                 # in place, contiguous
            d = ops.gelu(a, approximate="tanh")
            ops.relu_(d.t())             # in place on a view: copied back
        ra = torch.softmax(torch.relu(x), -1)
        torch.testing.assert_close(a, ra, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(c, torch.relu(torch.softmax(ra.t(), -1)),
                                   rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(d, torch.relu(gelu(ra, approximate="tanh")),
                                   rtol=1e-5, atol=1e-6)


def test_batch_misuse_is_named(ops):
    import opd.torch as ot
    if not _c_kernels():
        pytest.skip("no C kernels here: a batch changes nothing")
    with ot.batch():
        with pytest.raises(opd.OpdError, match="already open"):
            with ot.batch():
                pass
    # and the connection serves on, ordered as before
    x = torch.randn(16, 16, device=DEV)
    torch.testing.assert_close(ops.relu(x), torch.relu(x))


def test_bad_input_is_raised_at_the_call(ops):
    """Through the C kernels as through Python: an error naming the op and
    what was wrong, raised by the call itself (RuntimeError from torch's
    dispatcher for the C kernels, opd.BadArgumentError through Python)."""
    h = torch.randn(4, 96, device=DEV)
    w, b = torch.randn(32, device=DEV), torch.randn(32, device=DEV)
    with pytest.raises((RuntimeError, opd.OpdError), match="layernorm") as e:
        ops.layernorm(h, w, b, eps=1e-5)
    assert "32" in str(e.value) or "96" in str(e.value), str(e.value)
    with pytest.raises((RuntimeError, opd.OpdError), match="layernorm"):
        ops.layernorm(h, w.cpu(), b.cpu(), eps=1e-5)    # not all on CUDA
    with pytest.raises((RuntimeError, opd.OpdError)):
        ops.softmax(torch.zeros(4, 4, dtype=torch.complex64, device=DEV))
    # the connection goes on serving
    torch.testing.assert_close(ops.relu(h), torch.relu(h))


def test_client_run_on_torch_tensors_is_ordered(c):
    x = slow()[:128]
    out = torch.empty_like(x)
    c.run("softmax", x, out=out)
    torch.testing.assert_close(out, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    c.run("relu", out, out=out)         # in place, torch's memory
    torch.testing.assert_close(out, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)


def test_device_tensors_return_at_enqueue_and_settle(c):
    a = np.random.default_rng(3).standard_normal((2048, 2048)).astype(np.float32)
    d = c.from_numpy(a, device=DEV)
    y = c.empty((2048, 2048), device=DEV)
    for _ in range(20):
        c.run("matmul", d, d, out=y)    # answered at enqueue
    assert c._unsynced
    got = y.numpy()                     # a host read: after the runs
    ref = a.astype(np.float64) @ a.astype(np.float64)
    assert np.abs(got - ref).max() < 1e-2 * np.abs(ref).max()
    c.run("relu", y, out=y)
    v = y.torch()                       # a new view settles first
    torch.testing.assert_close(v, torch.relu(torch.from_numpy(got).to(DEV)))
    c.synchronize()
    assert not c._unsynced


def test_publish_settles_first(c, daemon):
    a = np.arange(1 << 20, dtype=np.float32) - 1000
    d = c.from_numpy(a, device=DEV)
    y = c.relu(d)                       # asynchronous
    name = "async-pub-%d" % os.getpid()
    c.publish(name, y)
    with opd.connect(daemon.socket) as b:
        got = b.attach(name).numpy()
    c.unpublish(name)
    np.testing.assert_array_equal(got, np.maximum(a, 0))


def test_client_exits_with_runs_in_flight(daemon):
    import subprocess
    import sys
    import time
    code = ("import os, opd\n"
            "c = opd.connect(%r)\n"
            "d = c.empty((2048, 2048), device='cuda:0')\n"
            "y = c.empty((2048, 2048), device='cuda:0')\n"
            "for _ in range(200):\n"
            "    c.run('matmul', d, d, out=y)\n"
            "print('enqueued', flush=True)\n"
            "os._exit(0)\n" % daemon.socket)
    with opd.connect(daemon.socket) as w:
        base = w.stats()
        p = subprocess.run([sys.executable, "-c", code], capture_output=True,
                           text=True, timeout=120, env=dict(os.environ))
        assert p.returncode == 0 and "enqueued" in p.stdout, p.stderr
        for _ in range(200):
            s = w.stats()
            if s["sessions"] == base["sessions"] and s["arenas"] == base["arenas"] \
                    and s["async"] == 0:
                break
            time.sleep(0.05)
        assert (s["sessions"], s["arenas"], s["async"]) == \
            (base["sessions"], base["arenas"], 0)
        assert s["healthy"]


def test_torch_devices_go_to_the_daemon_by_uuid(c, daemon):
    """The daemon is sent the UUID of the torch tensor's GPU, so a
    daemon with other CUDA_VISIBLE_DEVICES still opens the right one; the
    hello lists it; an import by it computes in place."""
    name = c.wire_device(0)
    assert name.startswith("GPU-"), name
    props = torch.cuda.get_device_properties(0)
    if hasattr(props, "uuid"):
        assert name[4:] == str(props.uuid), (name, props.uuid)
    uuids = [d.get("uuid") for d in c.server_info().get("devices", [])]
    assert name in uuids, (name, uuids)
    x = torch.randn(1000, device=DEV)
    want = torch.relu(x)
    t = c.from_torch(x)                 # imported by UUID
    c.run("relu", t, out=t)
    c.synchronize()
    torch.cuda.synchronize()
    torch.testing.assert_close(x, want)
