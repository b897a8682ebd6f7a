"""A GPT-2-shaped transformer under torch.compile(backend="opd") on the CPU:
written as transformers writes GPT-2 (token and position embeddings, a
fused qkv projection through torch.addmm split three ways, heads by view
and transpose, causal scaled_dot_product_attention, the tanh GELU written
out, dropout in eval, layer norms, the tied LM head), it becomes one opd
graph with no node left to torch, and its logits equal eager's."""
import logging
import math

import pytest

torch = pytest.importorskip("torch")
import opd  # noqa: E402
import opd.dynamo  # noqa: E402

if not opd.dynamo.available():
    pytest.skip(opd.dynamo.why_not(), allow_module_level=True)
import opd.torch  # noqa: E402,F401

nn, F = torch.nn, torch.nn.functional


NEEDED = {"embedding", "reshape", "permute", "slice", "sdpa", "linear",
          "layernorm", "gelu", "add"}


class Conv1D(nn.Module):             # transformers' Conv1D: x @ w + b
    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.05)
        self.bias = nn.Parameter(torch.randn(nf) * 0.05)

    def forward(self, x):
        shape = x.size()[:-1] + (self.weight.size(-1),)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(shape)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = Conv1D(3 * d, d), Conv1D(d, d)
        self.c_fc, self.mlp_proj = Conv1D(4 * d, d), Conv1D(d, 4 * d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = a.transpose(1, 2).contiguous().reshape(b, t, d)
        x = x + self.drop(self.c_proj(a))
        h = self.c_fc(self.ln_2(x))
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                        (h + 0.044715 * torch.pow(h, 3.0))))
        return x + self.drop(self.mlp_proj(h))


class TinyGPT(nn.Module):
    def __init__(self, vocab=50, d=32, heads=4, layers=2, ctx=64):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.h = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, ids):
        pos = torch.arange(ids.shape[-1], device=ids.device).unsqueeze(0)
        x = self.wte(ids) + self.wpe(pos)
        for blk in self.h:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


@pytest.mark.parametrize("batch,seq", [(1, 16), (2, 24)])
def test_a_gpt2_shaped_model_is_one_graph_with_eager_logits(c, backend, caplog,
                                                            batch, seq):
    missing = NEEDED - set(c.ops())
    if missing:
        pytest.skip("the daemon lacks %s" % sorted(missing))
    torch.manual_seed(0)
    m = TinyGPT().eval()
    ids = torch.randint(0, 50, (batch, seq))
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="opd.compile"):
        want = m(ids)
        f = torch.compile(m, backend=backend, dynamic=False)
        got = f(ids)
        again = f(ids)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(again, want, atol=1e-5, rtol=1e-5)
    fell = [r.getMessage() for r in caplog.records if r.name == "opd.compile"]
    assert fell == [], fell
    assert len(backend.last.opd_parts) == 1
    assert backend.last.opd_fallbacks == []


class TinyResNet(nn.Module):
    """conv-bn-relu, a max pool, one residual block, an adaptive average
    pool, flatten and a linear head, as torchvision's ResNets are built."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False),
                                  nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.MaxPool2d(3, stride=2, padding=1))
        self.c1, self.b1 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.c2, self.b2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8, 10)
        for bn in (self.stem[1], self.b1, self.b2):      # statistics not 0/1
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        x = self.stem(x)
        y = F.relu(self.b1(self.c1(x)))
        x = F.relu(x + self.b2(self.c2(y)))
        return self.fc(torch.flatten(self.pool(x), 1))


def test_a_resnet_shaped_model_is_one_graph_with_eager_outputs(c, backend, caplog):
    missing = {"conv2d", "batch_norm", "max_pool2d", "adaptive_avg_pool2d",
               "reshape", "linear"} - set(c.ops())
    if missing:
        pytest.skip("the daemon lacks %s" % sorted(missing))
    torch.manual_seed(0)
    m = TinyResNet().eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="opd.compile"):
        want = m(x)
        got = torch.compile(m, backend=backend, dynamic=False)(x)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    fell = [r.getMessage() for r in caplog.records if r.name == "opd.compile"]
    assert fell == [], fell
    assert len(backend.last.opd_parts) == 1
