"""compile_coverage.py: which real models torch.compile(backend=opd)
lowers, and how close the result is: per model the opd graphs made, the
FX nodes left to torch (the opd.compile log), the largest difference from
eager and the kinds of node left to torch. torchvision's models (random
weights) and small configs of transformers' GPT-2, LLaMA, Qwen2, T5
encoder, DistilBERT and BERT; CPU, eval, no_grad, torch threads 1.
ViT-B/16's head is replaced by nn.Identity (torchvision initializes it
to zeros, so its logits would be 0 however the encoder ran).

    OPD_LIB=build/libopd.so PYTHONPATH=python VENV/bin/python \\
        bench/compile_coverage.py SOCKET
Needs torch >= 2.4, torchvision and transformers.
"""
import sys, logging, torch, opd, opd.dynamo, opd.torch
import torchvision.models as tvm, transformers as tf
c = opd.connect(sys.argv[1])
class H(logging.Handler):
    def __init__(s): super().__init__(); s.lines = []
    def emit(s, r): s.lines.append(r.getMessage())
h = H(); lg = logging.getLogger("opd.compile"); lg.addHandler(h); lg.setLevel(logging.INFO)
torch.set_num_threads(1)
def tv(name, res):
    m = getattr(tvm, name)(weights=None).eval()
    if name == "vit_b_16":        # torchvision zeroes ViT's head: its output is 0 whatever
        m.heads = torch.nn.Identity()   # the encoder computes; compare the features
    return m, (torch.randn(1, 3, res, res),)
def hf(name):
    ids = torch.randint(0, 100, (2, 12))
    cfgs = {
     "gpt2": lambda: tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=64, use_cache=False)),
     "bert": lambda: tf.BertModel(tf.BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)),
     "llama": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, use_cache=False)),
     "qwen2": lambda: tf.Qwen2ForCausalLM(tf.Qwen2Config(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, use_cache=False)),
     "t5enc": lambda: tf.T5EncoderModel(tf.T5Config(vocab_size=100, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4)),
     "distilbert": lambda: tf.DistilBertModel(tf.DistilBertConfig(vocab_size=100, dim=64, n_layers=2, n_heads=4, hidden_dim=128)),
    }
    m = cfgs[name]().eval()
    kw = {"use_cache": False} if name in ("gpt2", "llama", "qwen2") else {}
    return (lambda i: m(i, **kw)[0]), (ids,)
cases = [("tv:" + n, lambda n=n, r=r: tv(n, r)) for n, r in [
    ("resnet18", 64), ("resnet50", 64), ("mobilenet_v2", 64), ("mobilenet_v3_small", 64),
    ("efficientnet_b0", 64), ("regnet_y_400mf", 64), ("shufflenet_v2_x0_5", 64),
    ("squeezenet1_0", 64), ("googlenet", 64), ("vgg11", 64), ("alexnet", 64), ("mnasnet0_5", 64),
    ("densenet121", 64), ("convnext_tiny", 64), ("swin_t", 112), ("vit_b_16", 224)]]
cases += [("hf:" + n, lambda n=n: hf(n)) for n in ["gpt2", "llama", "qwen2", "t5enc", "distilbert", "bert"]]
print("%-24s %6s %9s %10s  %s" % ("model", "graphs", "fallbacks", "max_err", "what stays with torch"))
for name, make in cases:
    torch.manual_seed(0); torch._dynamo.reset(); h.lines.clear()
    f, args = make(); be = opd.dynamo.Backend(c)
    with torch.no_grad():
        want = f(*args); got = torch.compile(f, backend=be, dynamic=False)(*args)
    err = (got - want).abs().max().item()
    fell = [l for l in h.lines if "cut into" not in l]
    why = sorted(set(l.split(":")[0] for l in fell))
    print("%-24s %6d %9d %10.2e  %s" % (name, len(be.last.opd_parts), len(fell), err, ", ".join(why)[:90]), flush=True)
