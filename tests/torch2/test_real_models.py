"""Real models under torch.compile(backend=opd) on the CPU: torchvision's
ResNet-18, ResNet-50, MobileNetV2 (relu6), MobileNetV3-small (hardswish,
hardsigmoid, squeeze-excitation, depthwise convs) and EfficientNet-B0
(random weights, eval) become one opd graph each with no node left to
torch, outputs within 1e-4 of eager (ConvNeXt-T, Swin-T and a small
VisionTransformer too); DenseNet-121 (cats of up to 25
tensors, average pools) two graphs, cut at the graph limits; a partition cut
under small graph limits gives the same outputs in several graphs; a
transformers GPT-2 (a small config) the same, where transformers is
installed. Skipped without torchvision / transformers."""
import logging

import pytest

torch = pytest.importorskip("torch")
import opd  # noqa: E402
import opd.dynamo  # noqa: E402

if not opd.dynamo.available():
    pytest.skip(opd.dynamo.why_not(), allow_module_level=True)
import opd.torch  # noqa: E402,F401
from opd import _fxgraph  # noqa: E402


def _compiled(m, backend, caplog, *args):
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="opd.compile"):
        want = m(*args)
        got = torch.compile(m, backend=backend, dynamic=False)(*args)
    fell = [r.getMessage() for r in caplog.records if r.name == "opd.compile"
            and "cut into" not in r.getMessage()]
    return want, got, fell


@pytest.mark.parametrize("name", ["resnet18", "resnet50", "mobilenet_v2",
                                  "mobilenet_v3_small", "efficientnet_b0",
                                  "convnext_tiny"])
def test_torchvision_model_is_one_graph(c, backend, caplog, name):
    tvm = pytest.importorskip("torchvision.models")
    torch.manual_seed(0)
    m = getattr(tvm, name)(weights=None).eval()
    x = torch.randn(1, 3, 64, 64)
    want, got, fell = _compiled(m, backend, caplog, x)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert fell == [], fell
    assert len(backend.last.opd_parts) == 1


def test_torchvision_densenet_is_two_graphs(c, backend, caplog):
    tvm = pytest.importorskip("torchvision.models")
    torch.manual_seed(0)
    m = tvm.densenet121(weights=None).eval()
    x = torch.randn(1, 3, 64, 64)
    want, got, fell = _compiled(m, backend, caplog, x)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert fell == [], fell
    assert len(backend.last.opd_parts) == 2


def test_swin_is_one_graph(c, backend, caplog):
    """Swin-T: its attention mask (x.new_zeros then filled slice by slice)
    folds into a constant with its writes, its relative position bias (a
    table indexed by a buffer) is an embedding, its window pads are cats
    of zeros."""
    tvm = pytest.importorskip("torchvision.models")
    torch.manual_seed(0)
    m = tvm.swin_t(weights=None).eval()
    x = torch.randn(1, 3, 112, 112)
    want, got, fell = _compiled(m, backend, caplog, x)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert fell == [], fell
    assert len(backend.last.opd_parts) == 1


def test_vision_transformer_is_one_graph(c, backend, caplog):
    """torchvision's VisionTransformer (ViT-B/16's code, a small config):
    nn.MultiheadAttention's fused forward written out (opd._fxmha), the
    class token a view of a parameter; its head replaced, since
    torchvision zeroes the head's weights (the output would be 0)."""
    vt = pytest.importorskip("torchvision.models.vision_transformer")
    torch.manual_seed(0)
    m = vt.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4,
                             hidden_dim=64, mlp_dim=128).eval()
    m.heads = torch.nn.Identity()
    x = torch.randn(2, 3, 32, 32)
    want, got, fell = _compiled(m, backend, caplog, x)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert fell == [], fell
    assert len(backend.last.opd_parts) == 1


def test_a_partition_over_the_limits_is_cut(c, backend, caplog, monkeypatch):
    tvm = pytest.importorskip("torchvision.models")
    monkeypatch.setattr(_fxgraph, "CHUNK_NODES", 20)
    monkeypatch.setattr(_fxgraph, "CHUNK_CONSTS", 24)
    torch.manual_seed(0)
    m = tvm.resnet18(weights=None).eval()
    x = torch.randn(2, 3, 32, 32)
    want, got, fell = _compiled(m, backend, caplog, x)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert fell == [], fell
    assert len(backend.last.opd_parts) >= 4
    assert any("cut into" in r.getMessage() for r in caplog.records)


def test_transformers_gpt2_is_one_graph(c, backend, caplog):
    tf = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = tf.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100,
                        n_positions=64, use_cache=False)
    m = tf.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 100, (2, 12))

    def logits(i):
        return m(i, use_cache=False).logits
    want, got, fell = _compiled(logits, backend, caplog, ids)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert fell == [], fell
    assert len(backend.last.opd_parts) == 1


@pytest.mark.parametrize("name", ["llama", "t5", "distilbert", "bert"])
def test_transformers_models_are_one_graph(c, backend, caplog, name):
    """LLaMA (rms_norm, rotary cos/sin, repeat_kv's x[:, :, None],
    grouped-query sdpa, SwiGLU MLP), the T5 encoder (its layer norm
    written out with rsqrt), DistilBERT and BERT (its token type ids
    taken with torch.gather), small configs."""
    tf = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if name == "llama":
        m = tf.LlamaForCausalLM(tf.LlamaConfig(
            vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, intermediate_size=128, use_cache=False))
    elif name == "t5":
        m = tf.T5EncoderModel(tf.T5Config(vocab_size=100, d_model=64, d_kv=16, d_ff=128,
                                          num_layers=2, num_heads=4))
    elif name == "bert":
        m = tf.BertModel(tf.BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, intermediate_size=128))
    else:
        m = tf.DistilBertModel(tf.DistilBertConfig(vocab_size=100, dim=64, n_layers=2,
                                                   n_heads=4, hidden_dim=128))
    m = m.eval()
    ids = torch.randint(0, 100, (2, 12))

    def out(i):
        return m(i, use_cache=False)[0] if name == "llama" else m(i)[0]
    want, got, fell = _compiled(out, backend, caplog, ids)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert fell == [], fell
    assert len(backend.last.opd_parts) == 1


def test_rolls_multi_dim_slices_and_empty_pads_lower(c, backend, caplog):
    """Swin's window shifts (torch.roll over two dims), patch merging's
    x[..., 0::2, 1::2, :] and a pad by zeros lower into one graph."""
    import torch.nn.functional as F

    def fn(x):
        h = torch.roll(x, shifts=(-3, 2), dims=(1, 2))
        h = F.pad(h, (0, 0, 0, 0, 0, 0))
        a, b = h[:, 0::2, 1::2, :], h[:, 1::2, 0::2, :]
        return torch.cat([a, b], -1) * 2 + x[:, 3, :, 1:].sum()
    x = torch.randn(2, 8, 6, 4)
    want, got, fell = _compiled(fn, backend, caplog, x)
    torch.testing.assert_close(got, want)
    assert fell == [], fell
    assert len(backend.last.opd_parts) == 1


def test_pools_and_rolls_opd_cannot_take_stay_with_torch(c, backend, caplog):
    """avg_pool2d whose windows overlap and a roll of the flattened tensor
    stay torch's, each logged with its reason; the rest still lowers and
    the result is eager's."""
    import torch.nn.functional as F

    def fn(x):
        a = F.avg_pool2d(x, 2)                    # tiles: adaptive_avg_pool2d
        b = F.avg_pool2d(x, 3, stride=1)          # overlapping windows
        return a.sum() + b.sum() + torch.roll(x, 5).relu().sum()
    x = torch.randn(1, 2, 6, 6)
    want, got, fell = _compiled(fn, backend, caplog, x)
    torch.testing.assert_close(got, want)
    assert any("avg_pool2d other than windows that tile" in f for f in fell), fell
    assert any("roll of the flattened tensor" in f for f in fell), fell
    assert len(fell) == 2, fell
    assert backend.last.opd_parts
