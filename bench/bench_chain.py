#!/usr/bin/env python3
"""bench_chain.py: a chain of 8 dependent tiny ops from one client,
enqueued one after the other with one synchronization at the end, through
opd (torch.ops.opd.*) against torch doing the same chain in-process
(the target: opd <= 1.2x torch).

DESIGN
The chain, on x (--shape, default 1x1024 float32 on CUDA) and w, b (the
last dim) made once (seed 0); each op takes the previous op's output:
  1 layernorm(y, w, b, eps=1e-5)     F.layer_norm(y, (C,), w, b, 1e-5)
  2 gelu(y, approximate="tanh")      F.gelu(y, approximate="tanh")
  3 softmax(y, dim=-1)               torch.softmax(y, -1)
  4 rmsnorm(y, w, eps=1e-6)          F.rms_norm(y, (C,), w, 1e-6)
  5 relu(y)                          torch.relu(y)
  6 mul(y, w)                        torch.mul(y, w)
  7 layernorm(y, w, b, eps=1e-5)     F.layer_norm(y, (C,), w, b, 1e-5)
  8 gelu(y)                          F.gelu(y)
(an order whose result does not saturate: a softmax last would give a
one-hot row here, which no error shows; in float32 this chain's result is
within 3e-8 of float64's, relative to its max).
Variants, each timed one chain at a time (perf_counter around the chain
and one torch.cuda.synchronize()), --rounds rounds of --iters chains after
--warmup chains, the variants alternating their order per round:
  torch            the chain in torch, then the sync
  opd              the chain through torch.ops.opd.*, then the sync
  opd_batch        the opd chain inside `with opd.torch.batch():` (the runs
                   ordered with each other on the daemon's stream, torch's
                   stream joined once at the end: docs/async.md, "Batches")
  opd_sync_each    the same with a sync after every op (what a client that
                   waits for each run pays: opd close to this means its
                   runs are not enqueued asynchronously)
  torch_sync_each  torch with a sync after every op
The figure is the median microseconds per chain of each and the ratios
opd / torch and opd_batch / torch (below 1: opd is faster). The chain's result through opd is
checked against torch's (max abs difference over the max |value|, bound
--tol, TF32 off; exit 1 past it).

Usage: python3 bench/bench_chain.py [--shape 1x1024] [--rounds 10]
         [--iters 200] [--warmup 50] [--socket PATH] [--json FILE]
         [--tol 1e-4]
Needs torch >= 2.4 with CUDA and an opd daemon with a CUDA device at
--socket / $OPD_SOCKET; skips (exit 0, one line saying why) without CUDA.
OPD_LIB=build/libopd.so in a checkout (bench/models.sh runs it too).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _torchbench as tb  # noqa: E402

PROG = "bench_chain"
OPD_OPS = ("layernorm", "relu", "gelu", "mul", "softmax", "rmsnorm")
N_OPS = 8


def chains(torch, x, w, b):
    """(torch chain, opd chain, each f(sync_each) -> result)."""
    F = torch.nn.functional
    O = torch.ops.opd
    C = x.shape[-1]
    sync = torch.cuda.synchronize

    def t_chain(each=False):
        y = F.layer_norm(x, (C,), w, b, 1e-5)
        each and sync()
        y = F.gelu(y, approximate="tanh")
        each and sync()
        y = torch.softmax(y, -1)
        each and sync()
        y = F.rms_norm(y, (C,), w, 1e-6)
        each and sync()
        y = torch.relu(y)
        each and sync()
        y = torch.mul(y, w)
        each and sync()
        y = F.layer_norm(y, (C,), w, b, 1e-5)
        each and sync()
        y = F.gelu(y)
        each and sync()
        return y

    def o_chain(each=False):
        y = O.layernorm(x, w, b, eps=1e-5)
        each and sync()
        y = O.gelu(y, approximate="tanh")
        each and sync()
        y = O.softmax(y, dim=-1)
        each and sync()
        y = O.rmsnorm(y, w, eps=1e-6)
        each and sync()
        y = O.relu(y)
        each and sync()
        y = O.mul(y, w)
        each and sync()
        y = O.layernorm(y, w, b, eps=1e-5)
        each and sync()
        y = O.gelu(y)
        each and sync()
        return y

    def b_chain():
        import opd.torch as ot
        with ot.batch():
            return o_chain()

    return t_chain, o_chain, b_chain


def timed_chains(torch, variants, rounds, iters, warmup):
    """{name: [us per chain]}: each chain timed alone (the chain, then one
    torch.cuda.synchronize()), rounds x iters samples, the variants' order
    reversed every other round."""
    import time
    sync = torch.cuda.synchronize
    for _, fn in variants:
        for _ in range(warmup):
            fn()
    sync()
    per = {n: [] for n, _ in variants}
    for r in range(rounds):
        order = variants if r % 2 == 0 else variants[::-1]
        for name, fn in order:
            out = per[name]
            for _ in range(iters):
                t0 = time.perf_counter()
                fn()
                sync()
                out.append((time.perf_counter() - t0) * 1e6)
    return per


def parse_shape(ap, s):
    try:
        shape = tuple(int(v) for v in s.lower().split("x"))
    except ValueError:
        ap.error("--shape %r: expected dims joined by x, e.g. 1x1024" % s)
    if not shape or any(d < 1 for d in shape):
        ap.error("--shape %r: every dim must be at least 1" % s)
    return shape


def main():
    ap = argparse.ArgumentParser(description="8 dependent tiny ops through opd, "
                                 "one sync at the end, against torch in-process")
    ap.add_argument("--shape", default="1x1024", help="x's shape (1x1024)")
    ap.add_argument("--rounds", type=int, default=10, help="rounds (10)")
    ap.add_argument("--iters", type=int, default=200,
                    help="chains per variant per round, each timed (200)")
    ap.add_argument("--warmup", type=int, default=50, help="chains first (50)")
    ap.add_argument("--socket", default=os.environ.get("OPD_SOCKET"),
                    help="the opd daemon's socket (default $OPD_SOCKET)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures here")
    ap.add_argument("--tol", type=float, default=1e-4,
                    help="bound on the result's max abs difference over its max "
                    "|value| (1e-4)")
    tb.add_legacy_arg(ap, "the opd chain (and its batch)")
    args = ap.parse_args()
    args.legacy = tb.legacy_modes(ap, args.legacy)
    shape = parse_shape(ap, args.shape)
    for k in ("rounds", "iters"):
        if getattr(args, k) < 1:
            ap.error("--%s must be at least 1" % k)
    if args.warmup < 0:
        ap.error("--warmup must be at least 0")

    torch = tb.require_cuda_torch(PROG)
    if not hasattr(torch.nn.functional, "rms_norm"):
        tb.skip(PROG, "torch %s has no F.rms_norm (needs >= 2.4)" % torch.__version__)
    opd, c = tb.connect(PROG, args.socket, OPD_OPS)
    tb.set_tf32(torch, False)
    tb.header(PROG, torch, opd, c, [
        "chain of %d ops on %s float32: layernorm gelu_tanh softmax rmsnorm relu mul "
        "layernorm gelu; warmup %d, %d rounds x %d chains per variant, each chain timed "
        "with one sync; %s" % (N_OPS, "x".join(map(str, shape)), args.warmup,
                               args.rounds, args.iters, tb.tf32_str(torch))])
    dev = torch.device("cuda", torch.cuda.current_device())
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(*shape, generator=g).to(dev)
    w = (torch.rand(shape[-1], generator=g) + 0.5).to(dev)
    b = (torch.randn(shape[-1], generator=g) * 0.1).to(dev)
    t_chain, o_chain, b_chain = chains(torch, x, w, b)

    status = 0
    with torch.no_grad():
        want = t_chain()
        got = o_chain()
        torch.cuda.synchronize()
        max_abs, rel, bad = tb.errors(torch, got, want)
        got_each = o_chain(True)
        max_abs_each, rel_each, bad_each = tb.errors(torch, got_each, want)
        got_b = b_chain()
        torch.cuda.synchronize()
        _, rel_b, bad_b = tb.errors(torch, got_b, want)
        del want, got, got_each, got_b
        ok = (not bad and not bad_each and not bad_b and rel <= args.tol and
              rel_each <= args.tol and rel_b <= args.tol)
        print("check max_abs=%.3g rel=%.3g sync_each_rel=%.3g batch_rel=%.3g tol=%.3g %s"
              % (max_abs, rel, rel_each, rel_b, args.tol, "ok" if ok else "FAIL"),
              flush=True)
        if not ok:
            status = 1
        variants = [("torch", t_chain), ("opd", o_chain), ("opd_batch", b_chain),
                    ("opd_sync_each", lambda: o_chain(True)),
                    ("torch_sync_each", lambda: t_chain(True))]
        if args.legacy:
            # opd@MODE, opd_batch@MODE; the others in the mode the process
            # started with
            set_legacy = tb.legacy_setter()
            start = set_legacy(None)
            variants = [(n, tb.in_mode(set_legacy, start, f)) for n, f in variants]
            for m in args.legacy:
                variants += [(n + "@" + m, tb.in_mode(set_legacy, m, f))
                             for n, f in (("opd", o_chain), ("opd_batch", b_chain))]
        per = timed_chains(torch, variants, args.rounds, args.iters, args.warmup)
        if args.legacy:
            set_legacy(start)
    med = {n: tb.median(v) for n, v in per.items()}
    p90 = {n: sorted(v)[int(0.9 * (len(v) - 1))] for n, v in per.items()}
    for n in ("torch", "opd", "opd_batch", "opd_sync_each", "torch_sync_each"):
        print("chain variant=%s ops=%d shape=%s p50_us=%.1f p90_us=%.1f per_op_us=%.2f"
              % (n, N_OPS, "x".join(map(str, shape)), med[n], p90[n], med[n] / N_OPS))
    for m in args.legacy:
        print("chain legacy=%s opd/torch=%.3f opd_batch/torch=%.3f"
              % (m, med["opd@" + m] / med["torch"], med["opd_batch@" + m] / med["torch"]))
    ratio = med["opd"] / med["torch"]
    ratio_b = med["opd_batch"] / med["torch"]
    print("chain ratio opd/torch=%.3f opd_batch/torch=%.3f "
          "opd_sync_each/torch_sync_each=%.3f opd/opd_sync_each=%.3f check=%s"
          % (ratio, ratio_b, med["opd_sync_each"] / med["torch_sync_each"],
             med["opd"] / med["opd_sync_each"], "ok" if status == 0 else "FAIL"),
          flush=True)
    if args.json:
        tb.write_json(PROG, args.json, {
            "program": PROG, "command": tb.command_line(), "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(), "shape": list(shape), "ops": N_OPS,
            "rounds": args.rounds, "iters": args.iters, "warmup": args.warmup,
            "p50_us": med, "p90_us": p90, "ratio_opd_torch": ratio,
            "ratio_opd_batch_torch": ratio_b,
            "max_abs": max_abs, "rel": rel, "tol": args.tol, "ok": status == 0,
            "samples_us": per})
    if status:
        print("%s: FAILED: the chain's result through opd differs from torch's"
              % PROG, file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
