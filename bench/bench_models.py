#!/usr/bin/env python3
"""bench_models.py: real models with some of their operators routed
through opd (torch.ops.opd.*), against torch's own forward, in one run.

DESIGN
Each model is built once with random weights (seed 0), on CUDA, in eval
mode, and deep-copied; in the copy some modules are replaced by small
nn.Module wrappers that hold the original's parameters and call
torch.ops.opd.* (`import opd.torch`), the rest stays torch:
  gpt2          transformers GPT2Model, GPT2Config(n_layer=4, n_embd=768,
                n_head=12, n_positions=1024), eager attention, batch 4 x
                256 random token ids; every nn.LayerNorm (ln_1, ln_2, ln_f)
                -> opd layernorm(x, weight, bias, eps=ln.eps), the MLP's
                activation (gelu_new, the tanh form) -> opd gelu(x,
                approximate="tanh"), the attention softmax -> opd
                softmax(x, dim=-1). The softmax is a call to
                torch.nn.functional.softmax inside transformers' eager
                attention (GPT2Attention._attn up to 4.47,
                eager_attention_forward from 4.48); each attention module's
                forward is wrapped so that, while it runs (and only then),
                torch.nn.functional.softmax is a function sending a float32
                softmax over the last dim to opd (anything else to torch's). The per-forward counts check that every one of
                them went through opd.
  resnet18      torchvision resnet18(weights=None), batch 8 x 3 x 224 x 224;
                every nn.ReLU -> opd relu_(x) (in place, as torchvision's
                inplace=True ReLUs) or relu(x).
  resnet18conv  the same, and every 3x3 nn.Conv2d (groups 1, zero padding:
                16 in resnet18, strides 1 and 2, padding 1, no bias) ->
                opd conv2d(x, weight[, bias], stride=, padding=,
                dilation=). BatchNorm, pooling, the 7x7 and 1x1
                convolutions and the fc layer stay torch.
Per model:
  correctness  one forward of each with TF32 off (matmul and cuDNN): max
               abs difference of the outputs (GPT-2 last_hidden_state,
               ResNet logits), and that over the output's max |value|
               ("rel"); rel above the model's bound (--tol-*) fails the run
               (exit 1 after all models ran), as does a non-finite value;
  opd calls    how many torch.ops.opd calls one forward makes, per op
               (counted by the wrappers; a count that is not the model's
               expected one is an error: a patch that did not take);
  timing       _torchbench.measure: --warmup forwards of each, then
               --rounds rounds of --iters forwards back to back with one
               torch.cuda.synchronize() at the end, torch and opd
               alternating; the median ms per forward of each and the
               ratio opd / torch (below 1: the opd model is faster).
               TF32 stays off (--tf32: torch's defaults while timing, the
               check still without).
Prints '#' header lines, one `model ...` key=value line per model and a
table; --json FILE writes the figures (per-round times too).

Usage: python3 bench/bench_models.py [--models gpt2,resnet18,resnet18conv]
         [--rounds 7] [--iters 20] [--warmup 10] [--socket PATH]
         [--json FILE] [--tf32] [--tol-gpt2 1e-4] [--tol-resnet18 1e-4]
         [--tol-resnet18conv 1e-3]
Needs torch >= 2.4 with CUDA, transformers (gpt2), torchvision (resnet18*)
and an opd daemon with a CUDA device at --socket / $OPD_SOCKET; skips
(exit 0, one line saying why) without CUDA or without the packages, per
model. OPD_LIB=build/libopd.so in a checkout (bench/models.sh does it all).
"""
import argparse
import copy
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _torchbench as tb  # noqa: E402

PROG = "bench_models"
MODELS = ("gpt2", "resnet18", "resnet18conv")
NEED = {"gpt2": "transformers", "resnet18": "torchvision",
        "resnet18conv": "torchvision"}
OPD_OPS = ("layernorm", "gelu", "softmax", "relu", "relu_", "conv2d")

torch = None      # the torch module, once require_cuda_torch() found CUDA
OPS = None        # torch.ops.opd once registered (a test may put a stand-in)
COUNTS = {}       # op name -> torch.ops.opd calls since the last reset


def count(name):
    COUNTS[name] = COUNTS.get(name, 0) + 1


# ---- the wrappers -------------------------------------------------------------
def wrappers():
    """The nn.Module classes (defined once torch is imported)."""
    nn = torch.nn

    class OpdLayerNorm(nn.Module):
        """nn.LayerNorm over the last dim -> opd layernorm."""

        def __init__(self, ln):
            super().__init__()
            shape = tuple(ln.normalized_shape)
            if len(shape) != 1:
                raise ValueError("LayerNorm over %s: opd's layernorm normalizes "
                                 "the last dim only" % (shape,))
            self.weight = ln.weight      # the original Parameters (or None)
            self.bias = ln.bias
            self.eps = float(ln.eps)

        def forward(self, x):
            count("layernorm")
            if self.weight is None:
                return OPS.layernorm(x, eps=self.eps)
            if self.bias is None:
                return OPS.layernorm(x, self.weight, eps=self.eps)
            return OPS.layernorm(x, self.weight, self.bias, eps=self.eps)

    class OpdGeluTanh(nn.Module):
        """transformers' gelu_new (NewGELUActivation: the tanh form) ->
        opd gelu(approximate="tanh")."""

        def forward(self, x):
            count("gelu")
            return OPS.gelu(x, approximate="tanh")

    class OpdReLU(nn.Module):
        def __init__(self, relu):
            super().__init__()
            self.inplace = bool(relu.inplace)

        def forward(self, x):
            if self.inplace:
                count("relu_")
                OPS.relu_(x)
                return x
            count("relu")
            return OPS.relu(x)

    class OpdConv2d(nn.Module):
        """nn.Conv2d (groups 1, zero padding) -> opd conv2d."""

        def __init__(self, conv):
            super().__init__()
            self.weight = conv.weight
            self.bias = conv.bias
            self.stride = [int(v) for v in conv.stride]
            self.padding = [int(v) for v in conv.padding]
            self.dilation = [int(v) for v in conv.dilation]

        def forward(self, x):
            count("conv2d")
            if self.bias is None:
                return OPS.conv2d(x, self.weight, stride=self.stride,
                                  padding=self.padding, dilation=self.dilation)
            return OPS.conv2d(x, self.weight, self.bias, stride=self.stride,
                              padding=self.padding, dilation=self.dilation)

    return OpdLayerNorm, OpdGeluTanh, OpdReLU, OpdConv2d


def inference_copy(mt):
    """A deep copy of model mt; both without requires_grad (inference:
    torch.ops.opd's ops have no autograd formula)."""
    mt.requires_grad_(False)
    return copy.deepcopy(mt)


def replace(model, pred, make):
    """Replaces every submodule m of model with pred(m) true by make(m);
    returns how many were replaced."""
    n = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if pred(child):
                setattr(parent, name, make(child))
                n += 1
    return n


def opd_softmax_factory(torch_softmax):
    """A stand-in for torch.nn.functional.softmax(input, dim=None,
    _stacklevel=3, dtype=None): a float32 softmax over the last dim goes to
    opd softmax, anything else to torch's (counted as softmax_torch)."""
    def softmax(input, dim=None, _stacklevel=3, dtype=None):
        if (dtype is None and dim is not None and input.dim() > 0 and
                input.dtype == torch.float32 and dim in (-1, input.dim() - 1)):
            count("softmax")
            return OPS.softmax(input, dim=-1)
        count("softmax_torch")
        return torch_softmax(input, dim=dim, _stacklevel=_stacklevel, dtype=dtype)
    return softmax


def wrap_attention(attn):
    """Wraps attention module attn's forward so that torch.nn.functional.
    softmax is opd's while it runs (restored on every path)."""
    F = torch.nn.functional
    inner = attn.forward

    def forward(*args, **kwargs):
        saved = F.softmax
        F.softmax = opd_softmax_factory(saved)
        try:
            return inner(*args, **kwargs)
        finally:
            F.softmax = saved
    attn.forward = forward


# ---- the models ---------------------------------------------------------------
def build_gpt2(dev):
    """(torch model, opd model, run(model) -> output, description, expected
    opd calls per forward)."""
    import transformers
    from transformers import GPT2Config, GPT2Model
    kw = dict(n_layer=4, n_embd=768, n_head=12, n_positions=1024)
    try:
        cfg = GPT2Config(attn_implementation="eager", **kw)
    except TypeError:           # a transformers without the argument: eager only
        cfg = GPT2Config(**kw)
    try:
        cfg._attn_implementation = "eager"
    except Exception:  # noqa: BLE001 (older: no such attribute to set)
        pass
    if cfg.activation_function != "gelu_new":
        raise RuntimeError("GPT2Config's activation is %r, expected gelu_new"
                           % cfg.activation_function)
    torch.manual_seed(0)
    mt = GPT2Model(cfg).to(dev).eval()
    impl = getattr(mt.config, "_attn_implementation", "eager")
    if impl != "eager":
        setter = getattr(mt, "set_attn_implementation", None)
        if setter is not None:
            setter("eager")
            impl = getattr(mt.config, "_attn_implementation", "eager")
    if impl != "eager":
        raise RuntimeError("transformers %s built GPT-2 with %r attention; this "
                           "benchmark needs eager" % (transformers.__version__, impl))
    mo = inference_copy(mt)
    OpdLayerNorm, OpdGeluTanh, _, _ = wrappers()
    n_ln = replace(mo, lambda m: isinstance(m, torch.nn.LayerNorm), OpdLayerNorm)
    L = cfg.n_layer
    acts = set()
    for i, block in enumerate(mo.h):
        for attr in ("attn", "mlp"):
            if not hasattr(block, attr):
                raise RuntimeError("GPT-2 block %d has no .%s (transformers %s)"
                                   % (i, attr, transformers.__version__))
        acts.add(type(block.mlp.act).__name__)
        block.mlp.act = OpdGeluTanh()
        wrap_attention(block.attn)
    if n_ln != 2 * L + 1:
        raise RuntimeError("found %d nn.LayerNorm in GPT-2, expected %d (ln_1, ln_2 "
                           "per block, ln_f)" % (n_ln, 2 * L + 1))
    torch.manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (4, 256), device=dev)

    def run(m):
        return m(input_ids=ids, use_cache=False).last_hidden_state

    desc = ("transformers %s GPT2Model n_layer=4 n_embd=768 n_head=12, %s attention, "
            "input 4x256 ids; opd: %d LayerNorm, %d MLP activations (%s -> gelu "
            "tanh), the attention softmax" % (transformers.__version__, impl, n_ln, L,
                                              ",".join(sorted(acts))))
    return mt, mo, run, desc, {"layernorm": 2 * L + 1, "gelu": L, "softmax": L}


def build_resnet18(dev, conv):
    import torchvision
    torch.manual_seed(0)
    try:
        mt = torchvision.models.resnet18(weights=None)
    except TypeError:           # torchvision < 0.13
        mt = torchvision.models.resnet18(pretrained=False)
    mt = mt.to(dev).eval()
    mo = inference_copy(mt)
    _, _, OpdReLU, OpdConv2d = wrappers()
    relus = [m for m in mo.modules() if isinstance(m, torch.nn.ReLU)]
    inplace = all(m.inplace for m in relus)
    replace(mo, lambda m: isinstance(m, torch.nn.ReLU), OpdReLU)
    expect = {"relu_" if inplace else "relu": 17}   # stem + 2 per BasicBlock x 8
    n_conv = 0
    if conv:
        def is3x3(m):
            return (isinstance(m, torch.nn.Conv2d) and tuple(m.kernel_size) == (3, 3)
                    and m.groups == 1 and m.padding_mode == "zeros"
                    and not isinstance(m.padding, str))
        n_conv = replace(mo, is3x3, OpdConv2d)
        expect["conv2d"] = n_conv
        if n_conv != 16:
            raise RuntimeError("found %d 3x3 convolutions in resnet18, expected 16"
                               % n_conv)
    torch.manual_seed(1)
    x = torch.randn(8, 3, 224, 224, device=dev)

    def run(m):
        return m(x)

    desc = ("torchvision %s resnet18(weights=None), input 8x3x224x224; opd: %d ReLU "
            "modules (%s, 17 calls)%s" % (torchvision.__version__, len(relus),
                        "in place" if inplace else "out of place",
                        ", %d 3x3 Conv2d" % n_conv if conv else ""))
    return mt, mo, run, desc, expect


BUILD = {"gpt2": build_gpt2,
         "resnet18": lambda dev: build_resnet18(dev, False),
         "resnet18conv": lambda dev: build_resnet18(dev, True)}


def calls_per_forward(run, mo):
    """{op: torch.ops.opd calls} of one forward of mo (counted on the host
    as the wrappers call, so no synchronization is needed)."""
    COUNTS.clear()
    run(mo)
    got = dict(COUNTS)
    COUNTS.clear()
    return got


def bench_model(name, args, dev):
    """Builds, checks and times one model; returns its figures (a dict with
    "ok" False and "error" set when it could not be run or was wrong)."""
    r = {"model": name, "ok": False}
    tol = getattr(args, "tol_" + name)
    r["tol"] = tol
    mt, mo, run, desc, expect = BUILD[name](dev)
    r["description"] = desc
    print("# %s: %s" % (name, desc), flush=True)
    with torch.no_grad():
        tb.set_tf32(torch, False)
        want = run(mt)
        got = run(mo)
        torch.cuda.synchronize()
        r["max_abs"], r["rel"], bad = tb.errors(torch, got, want)
        r["out_shape"] = list(want.shape)
        r["out_max_abs"] = float(want.abs().max())
        del want, got
        calls = calls_per_forward(run, mo)
        r["opd_calls"] = {k: v for k, v in calls.items() if k != "softmax_torch"}
        r["opd_calls_total"] = sum(r["opd_calls"].values())
        if calls.get("softmax_torch"):
            r["error"] = ("%d softmax call(s) per forward did not match opd's softmax "
                          "(not float32 over the last dim) and ran in torch"
                          % calls["softmax_torch"])
            return r
        if r["opd_calls"] != expect:
            r["error"] = ("opd calls per forward %s, expected %s: a module or the "
                          "softmax patch did not take (transformers/torchvision "
                          "version?)" % (r["opd_calls"], expect))
            return r
        if args.tf32:
            torch.backends.cudnn.allow_tf32 = True      # torch's defaults
            torch.backends.cuda.matmul.allow_tf32 = False
        r["timing_tf32"] = tb.tf32_str(torch)
        variants = [("torch", lambda: run(mt)), ("opd", lambda: run(mo))]
        if args.legacy:
            # opd@MODE: the opd forward with libopd's part of each call on
            # torch's default stream placed as MODE says; "opd" in the mode
            # the process started with (torch too: the same ctypes call in each)
            set_legacy = tb.legacy_setter()
            start = set_legacy(None)
            variants = [(n, tb.in_mode(set_legacy, start, f)) for n, f in variants]
            variants += [("opd@" + m, tb.in_mode(set_legacy, m, lambda: run(mo)))
                         for m in args.legacy]
        per = tb.measure(torch, variants, args.rounds, args.iters, args.warmup)
        if args.legacy:
            set_legacy(start)
            r["legacy_start"] = start
            r["legacy"] = {m: tb.median(per["opd@" + m]) for m in args.legacy}
        # what one opd forward asks of the daemon: requests and CUDA IPC
        # imports (an import per call would mean the import cache misses)
        st = STATS_CLIENT[0].stats() if STATS_CLIENT else None
        if st is not None:
            for _ in range(5):
                run(mo)
            torch.cuda.synchronize()
            st2 = STATS_CLIENT[0].stats()
            r["requests_per_forward"] = (st2["requests"] - st["requests"] - 1) / 5
            r["imports_per_forward"] = (st2.get("imports", 0) - st.get("imports", 0)) / 5
        tb.set_tf32(torch, False)
    r["rounds_ms"] = per
    r["torch_ms"] = tb.median(per["torch"])
    r["opd_ms"] = tb.median(per["opd"])
    r["ratio"] = r["opd_ms"] / r["torch_ms"]
    r["torch_host_ms"] = tb.median(per["torch@host"])   # until all is queued
    r["opd_host_ms"] = tb.median(per["opd@host"])
    r["delta_us_per_opd_call"] = ((r["opd_ms"] - r["torch_ms"]) * 1e3 /
                                  max(1, r["opd_calls_total"]))
    if bad:
        r["error"] = "the opd model's output has a non-finite value"
    elif not r["rel"] <= tol:
        r["error"] = ("output differs from torch's: max abs %.3g, rel %.3g > bound "
                      "%.3g" % (r["max_abs"], r["rel"], tol))
    else:
        r["ok"] = True
    return r


def line(r):
    calls = " ".join("%s=%d" % kv for kv in sorted(r.get("opd_calls", {}).items()))
    parts = ["model %s" % r["model"]]
    for k, fmt in (("torch_ms", "%.3f"), ("opd_ms", "%.3f"), ("ratio", "%.3f"),
                   ("delta_us_per_opd_call", "%.1f"), ("torch_host_ms", "%.3f"),
                   ("opd_host_ms", "%.3f"), ("requests_per_forward", "%.1f"),
                   ("imports_per_forward", "%.1f"), ("max_abs", "%.3g"),
                   ("rel", "%.3g"), ("tol", "%.3g")):
        if k in r:
            parts.append(("%s=" + fmt) % (k, r[k]))
    if "opd_calls_total" in r:
        parts.append("opd_calls=%d (%s)" % (r["opd_calls_total"], calls))
    for m, ms in r.get("legacy", {}).items():
        parts.append("opd@%s_ms=%.3f ratio@%s=%.3f" % (m, ms, m, ms / r["torch_ms"]))
    parts.append("check=%s" % ("ok" if r["ok"] else "FAIL"))
    if r.get("error"):
        parts.append("error=%r" % r["error"])
    return " ".join(parts)


def table(results):
    rows = [("model", "torch ms", "opd ms", "opd/torch", "opd calls", "max abs",
             "rel", "bound", "check")]
    for r in results:
        f = lambda k, fmt: (fmt % r[k]) if k in r else "-"  # noqa: E731
        rows.append((r["model"], f("torch_ms", "%.3f"), f("opd_ms", "%.3f"),
                     f("ratio", "%.3f"), f("opd_calls_total", "%d"),
                     f("max_abs", "%.2e"), f("rel", "%.2e"), f("tol", "%.0e"),
                     "ok" if r["ok"] else "FAIL"))
    w = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i])
                        for i, c in enumerate(row)))


STATS_CLIENT = []   # a second connection, for the daemon's counters


def main():
    global torch, OPS
    ap = argparse.ArgumentParser(description="GPT-2 and ResNet-18 forwards with "
                                 "ops through opd against torch's own, in one run")
    ap.add_argument("--models", default=",".join(MODELS),
                    help="comma-separated, of %s (default: all)" % ",".join(MODELS))
    ap.add_argument("--rounds", type=int, default=7, help="timed rounds (7)")
    ap.add_argument("--iters", type=int, default=20,
                    help="forwards per round, one sync at the end (20)")
    ap.add_argument("--warmup", type=int, default=10, help="forwards first (10)")
    ap.add_argument("--socket", default=os.environ.get("OPD_SOCKET"),
                    help="the opd daemon's socket (default $OPD_SOCKET)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures here")
    ap.add_argument("--tf32", action="store_true",
                    help="time with torch's default TF32 settings (cuDNN TF32 on); "
                    "the correctness check stays in float32 without TF32")
    # resnet18conv's looser bound: cuDNN may run a 3x3 float32 convolution as
    # Winograd or FFT, less exact than a direct sum (on the CPU, resnet18's
    # float32 logits differ from float64's by 4.6e-7 of their max)
    for m, t in (("gpt2", 1e-4), ("resnet18", 1e-4), ("resnet18conv", 1e-3)):
        ap.add_argument("--tol-" + m, type=float, default=t,
                        help="bound on %s's max abs difference over the output's "
                        "max |value| (%g)" % (m, t))
    tb.add_legacy_arg(ap, "the opd forward")
    args = ap.parse_args()
    args.legacy = tb.legacy_modes(ap, args.legacy)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown or not models:
        ap.error("--models: unknown %s; choose from %s"
                 % (",".join(unknown) or "(none given)", ",".join(MODELS)))
    for k in ("rounds", "iters"):
        if getattr(args, k) < 1:
            ap.error("--%s must be at least 1" % k)
    if args.warmup < 0:
        ap.error("--warmup must be at least 0")

    torch = tb.require_cuda_torch(PROG)
    runnable, skipped = [], []
    for m in models:
        try:
            __import__(NEED[m])
            runnable.append(m)
        except Exception as e:  # noqa: BLE001 (ImportError, or a broken install)
            skipped.append(m)
            print("%s: %s skipped: %s is not installed or cannot be imported (%s: %s)"
                  % (PROG, m, NEED[m], type(e).__name__, e), flush=True)
    if not runnable:
        tb.skip(PROG, "no model left to run (missing: %s)"
                % ", ".join(sorted({NEED[m] for m in skipped})))
    opd, c = tb.connect(PROG, args.socket, OPD_OPS)
    OPS = torch.ops.opd
    STATS_CLIENT.append(opd.connect(args.socket) if args.socket else opd.connect())
    extra = ["models %s; skipped %s" % (",".join(runnable), ",".join(skipped) or "none"),
             "timing: warmup %d, %d rounds x %d forwards, one sync per round, "
             "torch/opd alternating; correctness with TF32 off; timing %s"
             % (args.warmup, args.rounds, args.iters,
                "with torch's TF32 defaults (--tf32)" if args.tf32 else "with TF32 off")]
    tb.header(PROG, torch, opd, c, extra)
    dev = torch.device("cuda", torch.cuda.current_device())
    results = []
    for m in runnable:
        try:
            r = bench_model(m, args, dev)
        except Exception as e:  # noqa: BLE001 (report, go on with the next model)
            traceback.print_exc()
            r = {"model": m, "ok": False, "error": "%s: %s" % (type(e).__name__, e)}
        finally:
            COUNTS.clear()
        results.append(r)
        print(line(r), flush=True)
        torch.cuda.empty_cache()
    print()
    table(results)
    if args.json:
        tb.write_json(PROG, args.json, {
            "program": PROG, "command": tb.command_line(), "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(), "rounds": args.rounds,
            "iters": args.iters, "warmup": args.warmup, "tf32_timing": args.tf32,
            "skipped": skipped, "results": results})
    failed = [r["model"] for r in results if not r["ok"]]
    if failed:
        print("%s: FAILED: %s" % (PROG, ", ".join(failed)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
