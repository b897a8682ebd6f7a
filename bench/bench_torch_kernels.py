"""torch's own kernels on the shapes of `gpu_kernels --bench`, measured the
same way (median of 20 after an L2 flush, CUDA events), for a side-by-side
in the same run on the GPU machine:

    python3 bench/bench_torch_kernels.py

Prints `bench impl=torch op=… dtype=… shape=… us=… gbps=…` lines, and for
conv2d (3x3, stride 1, padding 1, bias; cuDNN through F.conv2d) `bench
impl=torch op=conv2d dtype=… shape=N…_C…_HxW_K… us=… tflops=…`, where
dtype=float32 is with TF32 off (float32 products and sums, as opd's igemm
and direct3x3) and float32_tf32 with TF32 on (torch's default for cuDNN
convolutions: 10-bit mantissa products, not comparable in accuracy).
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
         ((256, 262144), torch.float32), ((8192, 8192), torch.bfloat16),
         ((8192, 8192), torch.float16)]
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
        if dt == torch.float16 and name != "gelu":
            continue  # gpu_kernels --bench times float16 for gelu only
        try:
            us = timed(fn)
            print("bench impl=torch op=%s dtype=%s shape=[%d,%d] us=%.1f gbps=%.0f"
                  % (name, str(dt).replace("torch.", ""), shape[0], shape[1], us,
                     nbytes / us / 1e3), flush=True)
        except Exception as e:  # keep going: one line per failure
            print("bench impl=torch op=%s error=%r" % (name, e), flush=True)

# conv2d: the shapes of gpu_kernels --bench (N, C, H=W, K), 3x3, padding 1
conv_cases = [(1, 3, 224, 64), (1, 64, 56, 64), (8, 256, 14, 256), (32, 64, 56, 64)]
conv_dtypes = [("float32", torch.float32, False), ("float32_tf32", torch.float32, True),
               ("bfloat16", torch.bfloat16, False), ("float16", torch.float16, False)]
torch.backends.cudnn.benchmark = True  # cuDNN picks its fastest algorithm per shape
for label, dt, tf32 in conv_dtypes:
    torch.backends.cudnn.allow_tf32 = tf32
    for n, c, hw, k in conv_cases:
        try:
            x = torch.randn((n, c, hw, hw), dtype=dt, device=dev)
            w = torch.randn((k, c, 3, 3), dtype=dt, device=dev)
            b = torch.randn((k,), dtype=dt, device=dev)
            us = timed(lambda: F.conv2d(x, w, b, padding=1))
            flops = 2.0 * n * k * hw * hw * c * 9
            print("bench impl=torch op=conv2d dtype=%s shape=N%d_C%d_%dx%d_K%d us=%.1f tflops=%.2f"
                  % (label, n, c, hw, hw, k, us, flops / us / 1e6), flush=True)
        except Exception as e:  # keep going: one line per failure
            print("bench impl=torch op=conv2d dtype=%s error=%r" % (label, e), flush=True)
# the 3x3 convolutions of ResNet-18 at batch 8 (gpu_kernels --bench's last
# six float32 shapes), TF32 off, with cuDNN's default algorithm choice (as
# bench/bench_models.py runs the model) and its benchmarked one
for bm in (False, True):
    torch.backends.cudnn.benchmark = bm
    torch.backends.cudnn.allow_tf32 = False
    for n, c, hw, k, st in [(8, 64, 56, 64, 1), (8, 64, 56, 128, 2), (8, 128, 28, 128, 1),
                            (8, 128, 28, 256, 2), (8, 256, 14, 512, 2), (8, 512, 7, 512, 1)]:
        x = torch.randn((n, c, hw, hw), device=dev)
        w = torch.randn((k, c, 3, 3), device=dev)
        b = torch.randn((k,), device=dev)
        us = timed(lambda: F.conv2d(x, w, b, stride=st, padding=1))
        pq = ((hw + 2 - 3) // st + 1) ** 2
        print("bench impl=torch op=conv2d dtype=float32%s shape=N%d_C%d_%dx%d_K%d%s us=%.1f "
              "tflops=%.2f" % ("_bench" if bm else "", n, c, hw, hw, k, "_s2" if st == 2 else "",
                              us, 2.0 * n * k * pq * c * 9 / us / 1e6), flush=True)
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.allow_tf32 = True
