#!/usr/bin/env python3
"""bench_compile.py: a model under torch.compile(backend="opd") against
torch eager, same process, same run (docs/graphs.md, docs/python.md).

    python3 bench/bench_compile.py --socket /tmp/opd.sock
        [--model gpt2|llama|mlp|tv:NAME] [--device cuda] [--shapes 1x16,4x256]
        [-n 50] [--attn sdpa|eager] [--threads N]

GPT-2 small (12 layers, transformers' GPT2LMHeadModel from its config,
random weights: no download; no KV cache; attention through torch's
scaled_dot_product_attention, or --attn eager for transformers' own
matmul/softmax attention), a LLaMA of the same size (hidden 768, 12
heads, 4 KV heads, MLP 2048, vocab 32000, --layers), the trading MLP,
or a torchvision model (tv:resnet50, tv:mobilenet_v3_small, ...; shapes
then BxR: batch x resolution R x R); fp32, TF32 off, eval,
no grad. Prints per shape: eager and compiled forward time (median of n,
synchronized), their ratio, the largest absolute difference of the
logits, how many opd graphs the backend made and how many FX nodes fell
back to torch (the opd.compile log, counted), and the card or CPU.
"""
import argparse
import logging
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


class Count(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def timed(fn, x, n, sync):
    for _ in range(3):
        fn(x)
    sync()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn(x)
        sync()
        ts.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", default=os.environ.get("OPD_SOCKET"))
    ap.add_argument("--model", default="gpt2",
                    help="gpt2, llama, mlp or tv:NAME (a torchvision model)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shapes", default="1x16,4x256")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("-n", type=int, default=50)
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    ap.add_argument("--threads", type=int, default=0,
                    help="torch's CPU threads (0: torch's default)")
    a = ap.parse_args()
    if a.socket:
        os.environ["OPD_SOCKET"] = a.socket
    import torch
    import opd
    import opd.torch  # noqa: F401  registers backend "opd"
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    card = torch.cuda.get_device_name(dev) if cuda else "cpu"
    log = Count()
    logging.getLogger("opd.compile").addHandler(log)
    logging.getLogger("opd.compile").setLevel(logging.INFO)
    torch.manual_seed(0)
    if a.model == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(n_layer=a.layers, attn_implementation=a.attn)
        model = GPT2LMHeadModel(cfg).to(dev).eval()
        make = lambda b, t: torch.randint(0, cfg.vocab_size, (b, t), device=dev)  # noqa: E731
        fwd = lambda m: (lambda x: m(x, use_cache=False).logits)  # noqa: E731
    elif a.model == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(hidden_size=768, num_hidden_layers=a.layers,
                          num_attention_heads=12, num_key_value_heads=4,
                          intermediate_size=2048, vocab_size=32000, use_cache=False,
                          attn_implementation=a.attn)
        model = LlamaForCausalLM(cfg).to(dev).eval()
        make = lambda b, t: torch.randint(0, cfg.vocab_size, (b, t), device=dev)  # noqa: E731
        fwd = lambda m: (lambda x: m(x, use_cache=False).logits)  # noqa: E731
    elif a.model.startswith("tv:"):
        import torchvision.models as tvm
        model = getattr(tvm, a.model[3:])(weights=None).to(dev).eval()
        make = lambda b, r: torch.randn(b, 3, r, r, device=dev)  # noqa: E731
        fwd = lambda m: m  # noqa: E731
    else:
        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                    torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                    torch.nn.Linear(512, 1)).to(dev).eval()
        make = lambda b, t: torch.randn(b, 256, device=dev)  # noqa: E731
        fwd = lambda m: m  # noqa: E731
    print("# bench_compile: model=%s layers=%d attn=%s device=%s card=%s torch=%s "
          "torch_threads=%d" % (a.model, a.layers, a.attn, a.device, card,
                                torch.__version__, torch.get_num_threads()))
    with torch.no_grad():
        for shape in a.shapes.split(","):
            b, t = (int(v) for v in shape.split("x"))
            x = make(b, t)
            torch._dynamo.reset()
            log.lines.clear()
            compiled = torch.compile(model, backend="opd", dynamic=False)
            t0 = time.perf_counter()
            want = fwd(model)(x)
            got = fwd(compiled)(x)
            sync()
            compile_s = time.perf_counter() - t0
            diff = (want - got).abs().max().item()
            eager = timed(fwd(model), x, a.n, sync)
            comp = timed(fwd(compiled), x, a.n, sync)
            c = opd.client()
            graphs = c.stats().get("graphs", {}).get("live", 0)
            fell = sum(1 for line in log.lines if "cut into" not in line)
            print("compile model=%s shape=%dx%d eager_us=%.1f opd_us=%.1f ratio=%.3f "
                  "max_abs_diff=%.3g graphs_live=%s fallback_log_lines=%d compile_s=%.1f"
                  % (a.model, b, t, eager, comp, comp / eager, diff, graphs, fell,
                     compile_s))
            for line in sorted(set(log.lines))[:12]:
                print("#   opd.compile: " + line)


if __name__ == "__main__":
    main()
