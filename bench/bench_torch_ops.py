"""bench_torch_ops: opd operators called as torch ops (import opd.torch)
against torch's own, per call, in the same run.

DESIGN
Each case times a callable one call at a time (a CUDA case synchronizes
after each torch call; an opd call returns when the daemon has finished),
after a warm-up, in alternating blocks so that a shared machine's drift
lands on both sides; it prints the median per call and the ratio
opd / torch (below 1: opd is faster). Cases:
  softmax   torch.ops.opd.softmax(x) vs torch.softmax(x, -1): CPU and CUDA
            tensors, tiny (1x1024) and large (CPU 2048x2048, CUDA
            8192x8192); also on an input that is already an opd output
            (CPU: no copy in), the out= variant writing into a given
            tensor (torch.ops.opd.softmax_out; CPU: an earlier opd output,
            so in place; CUDA: a torch tensor, imported once) and the
            in-place form (torch.ops.opd.softmax_), and through the Client
            on an opd Tensor (c.softmax, the cost without the torch op
            layer)
  conv3x3   the conv3x3_bias_relu plugin (torch.ops.opd.conv3x3_bias_relu)
            vs opd conv2d + relu (two torch.ops.opd calls) vs
            F.relu(F.conv2d(...)), on CUDA only, docs/gpu.md's shapes
Needs torch >= 2.4 and a daemon with the example plugins ($OPD_SOCKET).

Usage: python3 bench/bench_torch_ops.py [-n REPS]
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import opd
import opd.torch  # noqa: F401  (registers torch.ops.opd.*)

BLOCKS = 5


def timed(fn, reps, sync):
    fn()
    if sync:
        torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        if sync:
            torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return out


def compare(label, fns, reps, sync):
    """fns: [(name, callable)]; the first is opd's. Prints one line."""
    times = {n: [] for n, _ in fns}
    per = max(1, reps // BLOCKS)
    for _ in range(BLOCKS):
        for n, f in fns:
            times[n] += timed(f, per, sync)
    med = {n: statistics.median(v) * 1e6 for n, v in times.items()}
    base = fns[-1][0]
    parts = " ".join("%s_us=%.1f" % (n, med[n]) for n, _ in fns)
    ratios = " ".join("%s/%s=%.2f" % (n, base, med[n] / med[base]) for n, _ in fns[:-1])
    print("%s %s %s" % (label, parts, ratios), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=200)
    a = ap.parse_args()
    c = opd.torch.client()
    cuda = torch.cuda.is_available() and bool(c.devices())
    print("# bench_torch_ops: torch %s, opd daemon %s, devices %s"
          % (torch.__version__, c.server_info().get("version"), c.devices()))
    if cuda:
        print("# gpu: %s" % torch.cuda.get_device_name())
    cases = [("cpu", (1, 1024)), ("cpu", (2048, 2048))]
    if cuda:
        cases += [("cuda", (1, 1024)), ("cuda", (8192, 8192))]
    for dev, shape in cases:
        x = torch.randn(*shape, device=dev)
        torch.testing.assert_close(torch.ops.opd.softmax(x), torch.softmax(x, -1))
        reps = a.n if shape[0] * shape[1] <= 1 << 20 else max(BLOCKS, a.n // 10)
        xt = c.from_torch(x)     # the same op through the Client, no torch layer
        y = torch.ops.opd.softmax(x)   # on the cpu: in an arena, so no copy in
        out = y.clone() if dev == "cuda" else torch.ops.opd.softmax(x)
        z = torch.ops.opd.softmax(x)   # softmax_ of a softmax stays finite
        torch.ops.opd.softmax_out(x, out=out)
        torch.testing.assert_close(out, torch.softmax(x, -1))
        compare("softmax device=%s shape=%dx%d" % ((dev,) + shape),
                [("opd", lambda: torch.ops.opd.softmax(x)),
                 ("opd_arena_input", lambda: torch.ops.opd.softmax(y)),
                 ("opd_out", lambda: torch.ops.opd.softmax_out(x, out=out)),
                 ("opd_inplace", lambda: torch.ops.opd.softmax_(z)),
                 ("opd_client", lambda: c.softmax(xt)),
                 ("torch", lambda: torch.softmax(x, -1))], reps, dev == "cuda")
    if not cuda:
        return
    for N, C, H, K in ((1, 3, 224, 64), (1, 64, 56, 64), (8, 256, 14, 256),
                       (32, 64, 56, 64)):
        x = torch.randn(N, C, H, H, device="cuda")
        w = torch.randn(K, C, 3, 3, device="cuda") * 0.1
        b = torch.randn(K, device="cuda")
        torch.backends.cudnn.allow_tf32 = False   # float32 for the check
        want = F.relu(F.conv2d(x, w, b, padding=1))
        torch.backends.cudnn.allow_tf32 = True    # torch's default, timed
        torch.testing.assert_close(torch.ops.opd.conv3x3_bias_relu(x, w, b), want,
                                   rtol=2e-3, atol=2e-3)
        compare("conv3x3 N=%d C=%d H=W=%d K=%d device=cuda" % (N, C, H, K),
                [("opd_fused", lambda: torch.ops.opd.conv3x3_bias_relu(x, w, b)),
                 ("opd_conv2d_relu",
                  lambda: torch.ops.opd.relu(torch.ops.opd.conv2d(x, w, b, padding=[1]))),
                 ("torch", lambda: F.relu(F.conv2d(x, w, b, padding=1)))],
                max(BLOCKS, a.n // 4), True)


if __name__ == "__main__":
    main()
