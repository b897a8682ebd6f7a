"""profile_torch_ops: where a torch.ops.opd.* call spends its time.

DESIGN
A diagnostic, not a benchmark (bench_torch_ops.py makes the speed claims):
  floor   what torch's registration costs per call before any opd code
          runs: the same trivial body called directly, as a
          torch.library.custom_op (what opd.torch uses) and as a
          torch.library.Library define/impl op
  parts   the pieces of an opd call on their own: the round trip (c.noop),
          torch.cuda.synchronize, a torch view of a host / device output
  profile cProfile of torch.ops.opd.softmax on CPU (1x1024, 2048x2048) and
          CUDA (1x1024) tensors: the functions by own time
Needs torch >= 2.4 and a daemon at $OPD_SOCKET.

Usage: python3 bench/profile_torch_ops.py [-n CALLS] [--top N]
"""
import argparse
import cProfile
import io
import os
import pstats
import sys

import torch

import opd
import opd.torch  # noqa: F401  (registers torch.ops.opd.*)


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _torchbench import per_call  # noqa: E402


def floor(n):
    def body(x):
        return torch.empty(0)

    lib = torch.library.Library("opdprobe", "DEF")
    lib.define("ident(Tensor x) -> Tensor")
    lib.impl("ident", body, "CompositeExplicitAutograd")
    torch.library.custom_op("opdprobe2::ident", body, mutates_args=(),
                            schema="(Tensor x) -> Tensor")
    x = torch.randn(4)
    print("floor direct_us=%.1f custom_op_us=%.1f library_us=%.1f" % (
        per_call(lambda: body(x), n), per_call(lambda: torch.ops.opdprobe2.ident(x), n),
        per_call(lambda: torch.ops.opdprobe.ident(x), n)))
    return lib


def parts(c, cuda, n):
    x = torch.randn(1, 1024)
    y = c.empty((1, 1024))
    line = "parts noop_us=%.1f from_dlpack_us=%.1f" % (
        per_call(c.noop, n), per_call(lambda: torch.from_dlpack(y), n))
    try:
        from opd._torchops import host_view
        line += " host_view_us=%.1f" % per_call(lambda: host_view(y), n)
    except ImportError:       # an opd before _torchops
        pass
    if cuda:
        xc = x.cuda()
        d = c.empty((1, 1024), device="cuda")
        d.torch()
        line += " cuda_sync_us=%.1f device_view_us=%.1f from_torch_cuda_us=%.1f" % (
            per_call(torch.cuda.synchronize, n), per_call(d.torch, n),
            per_call(lambda: c._from_torch_cuda(xc), n))
    print(line)


def profile(label, fn, n, top):
    fn()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        fn()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(top)
    lines = [ln for ln in s.getvalue().splitlines() if ln.strip()]
    print("== profile %s (%d calls)" % (label, n))
    print("\n".join(lines[:top + 6]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--top", type=int, default=14)
    a = ap.parse_args()
    c = opd.torch.client()
    cuda = torch.cuda.is_available() and bool(c.devices())
    keep = floor(a.n)  # noqa: F841  (the probe library lives while we run)
    parts(c, cuda, a.n)
    x = torch.randn(1, 1024)
    profile("softmax cpu 1x1024", lambda: torch.ops.opd.softmax(x), a.n, a.top)
    xl = torch.randn(2048, 2048)
    profile("softmax cpu 2048x2048", lambda: torch.ops.opd.softmax(xl),
            max(5, a.n // 100), a.top)
    if cuda:
        xc = x.cuda()
        profile("softmax cuda 1x1024", lambda: torch.ops.opd.softmax(xc), a.n, a.top)


if __name__ == "__main__":
    main()
