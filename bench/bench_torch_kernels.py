"""torch's own kernels on the shapes of `gpu_kernels --bench`, measured the
same way (median of 20 after an L2 flush, CUDA events), for a side-by-side
in the same run on the GPU machine:

    python3 bench/bench_torch_kernels.py

Prints `bench impl=torch op=… dtype=… shape=… us=… gbps=…` lines.
"""
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("bench impl=torch skipped: torch is not installed")
    sys.exit(0)

if not torch.cuda.is_available():
    print("bench impl=torch skipped: no CUDA device")
    sys.exit(0)

dev = torch.device("cuda")
flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)


def timed(fn, reps=20):
    ts = []
    for _ in range(3):
        fn()
    for _ in range(reps):
        flush.zero_()
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) * 1000.0)
    ts.sort()
    return ts[len(ts) // 2]


cases = [((8192, 8192), torch.float32), ((1024, 65536), torch.float32),
         ((256, 262144), torch.float32), ((8192, 8192), torch.bfloat16)]
for shape, dt in cases:
    x = torch.randn(shape, dtype=dt, device=dev)
    C = shape[-1]
    w = torch.randn(C, dtype=dt, device=dev)
    b = torch.randn(C, dtype=dt, device=dev)
    nbytes = 2 * x.numel() * x.element_size()
    ops = {
        "softmax": lambda: torch.softmax(x, -1),
        "layernorm": lambda: F.layer_norm(x, (C,), w, b, 1e-5),
        "rmsnorm": lambda: F.rms_norm(x, (C,), w),
        "gelu": lambda: F.gelu(x),
    }
    for name, fn in ops.items():
        try:
            us = timed(fn)
            print("bench impl=torch op=%s dtype=%s shape=[%d,%d] us=%.1f gbps=%.0f"
                  % (name, str(dt).replace("torch.", ""), shape[0], shape[1], us,
                     nbytes / us / 1e3), flush=True)
        except Exception as e:  # keep going: one line per failure
            print("bench impl=torch op=%s error=%r" % (name, e), flush=True)
