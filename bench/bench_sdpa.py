"""bench_sdpa: opd's sdpa (torch.ops.opd.sdpa) against torch's
F.scaled_dot_product_attention, per call, in the same run, on the CPU and,
where the daemon has a GPU, on CUDA.

DESIGN
Shapes are GPT-2's attention (H = 12 heads, D = 64, causal) at B = 1..4
and T = 16..256, plus a non-causal case and one with a bool mask. Each
case first checks opd's result against torch's (max abs error printed;
float32 within 1e-4, the half types within 2e-2), then times both with
bench_torch_ops.compare: alternating blocks after a warm-up, the median
per call and the ratio opd / torch (below 1: opd is faster). An opd call
on the CPU includes the round trip to the daemon and the copies into its
arena (opd_client: the same op through the Client on tensors already in
an arena, the cost without the torch op layer); on CUDA it is torch's
memory used in place, synchronized after each call like torch's. GFLOP/s
counts 4 * B * H * Tq * Tk * D (halved for causal) per call.
Needs torch >= 2.4 and a daemon ($OPD_SOCKET).

Usage: python3 bench/bench_sdpa.py [-n REPS] [--dtypes float32,float16]
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import opd.torch  # noqa: E402,F401  (registers torch.ops.opd.*)
from bench_torch_ops import compare  # noqa: E402

CASES = [  # (B, T, causal, mask)
    (1, 16, True, False), (1, 64, True, False), (1, 128, True, False),
    (1, 256, True, False), (4, 16, True, False), (4, 64, True, False),
    (4, 256, True, False), (2, 128, False, False), (2, 128, False, True),
]
H, D = 12, 64


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=100)
    ap.add_argument("--dtypes", default="float32,float16,bfloat16",
                    help="dtypes for CUDA (the CPU runs float32 only)")
    a = ap.parse_args()
    c = opd.torch.client()
    cuda = torch.cuda.is_available() and bool(c.devices())
    print("# bench_sdpa: torch %s, opd daemon %s, devices %s, %d torch threads"
          % (torch.__version__, c.server_info().get("version"), c.devices(),
             torch.get_num_threads()))
    if cuda:
        print("# gpu: %s" % torch.cuda.get_device_name())
    runs = [("cpu", torch.float32)]
    if cuda:
        runs += [("cuda", getattr(torch, n)) for n in a.dtypes.split(",")]
    for dev, dt in runs:
        for B, T, causal, masked in CASES:
            q, k, v = (torch.randn(B, H, T, D, device=dev, dtype=dt) for _ in range(3))
            mask = torch.rand(T, T, device=dev) > 0.2 if masked else None
            want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
            args = (q, k, v) + ((mask,) if masked else ())
            got = torch.ops.opd.sdpa(*args, causal=causal)
            err = (got.float() - want.float()).abs().max().item()
            limit = 1e-4 if dt == torch.float32 else 2e-2
            if not err <= limit:
                print("sdpa device=%s dtype=%s B=%d T=%d: max_abs_err=%.3g over %g: FAIL"
                      % (dev, str(dt)[6:], B, T, err, limit))
                sys.exit(1)
            reps = a.n if B * T <= 256 else max(5, a.n // 4)
            label = "sdpa device=%s dtype=%s B=%d H=%d T=%d D=%d%s%s max_abs_err=%.2g" % (
                dev, str(dt)[6:], B, H, T, D, " causal" if causal else "",
                " mask" if masked else "", err)
            fns = [("opd", lambda: torch.ops.opd.sdpa(*args, causal=causal))]
            if dev == "cpu":
                ts = [c.from_torch(t) for t in args]
                fns.append(("opd_client", lambda: c.sdpa(*ts, causal=causal)))
            fns.append(("torch", lambda: F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=causal)))
            compare(label, fns, reps, dev == "cuda")
            flop = 4.0 * B * H * T * T * D * (0.5 if causal else 1.0)
            t = statistics.median(
                [_one(fns[0][1], dev == "cuda") for _ in range(5)])
            print("  opd_gflops=%.1f" % (flop / t / 1e9), flush=True)


def _one(fn, sync):
    """Seconds of one call of fn."""
    t0 = time.perf_counter()
    fn()
    if sync:
        torch.cuda.synchronize()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
