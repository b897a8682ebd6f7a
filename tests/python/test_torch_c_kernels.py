"""libopd's C kernels for torch's dispatcher (client/torch/)
without torch: tests/torch/fake_torch.c defines toy shims of torch's
stable C ABI, registers the kernels and calls them as the dispatcher
would, against the daemon under test (the stack as torch lays it out, one
shape rule per signature, outputs allocated as it says, every handle
released, errors naming the op; with "cpu", the CPU key's kernels too: a
run in an arena, its output block given back, the fallback). CI runs it;
the real kernels run on the
GPU machine (test_gpu_async.py, test_torch_ops.py with torch 2.11).
Skips where the program is not built, or where a CUDA driver loads (the
toy stream and pointers would reach it).
"""
import ctypes
import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _fake_torch(daemon, *args):
    """fake_torch's output against the daemon (skips where it cannot run)."""
    build = os.environ.get("OPD_BUILD") or os.path.join(REPO, "build")
    exe = os.path.join(build, "tests", "fake_torch")
    if not os.path.exists(exe):
        pytest.skip("%s is not built (make %s)" % (exe, os.path.relpath(exe, REPO)))
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        pass
    else:
        pytest.skip("a CUDA driver is here: the toy stream would reach it "
                    "(test_gpu_async.py runs the real kernels)")
    r = subprocess.run([exe, daemon.socket] + list(args), capture_output=True,
                       text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def test_c_kernels_against_toy_shims(daemon):
    rc, out = _fake_torch(daemon)
    assert rc == 0, out
    assert " 0 failed" in out and "FAIL" not in out, out
    assert "36 passed" in out, out


def test_cpu_kernels_against_toy_shims(daemon):
    # the same, with the CPU key's kernels (client/torch/cpukern.c): a run
    # on a tensor in an arena, its output block given back, the fallback
    rc, out = _fake_torch(daemon, "cpu")
    assert rc == 0 and " 0 failed" in out and "FAIL" not in out, out
    assert "47 passed" in out, out
