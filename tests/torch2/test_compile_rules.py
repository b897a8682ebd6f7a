"""Rules of the torch.compile backend for what real models call beyond
the element-wise and row-wise ops (opd._fxindex, opd._fxmha): each lowers
into one opd graph with nothing left to torch and gives eager's result,
on the CPU: torch.gather (BERT's token type ids), nn.MultiheadAttention
(torchvision's ViT), masked_fill, torch.where, zeros_like, constant pads
and a table indexed by a buffer (Swin's pieces), comparisons, integer
arithmetic; and what stays torch's, logged with its reason."""
import logging
import math

import pytest

torch = pytest.importorskip("torch")
import opd  # noqa: E402
import opd.dynamo  # noqa: E402

if not opd.dynamo.available():
    pytest.skip(opd.dynamo.why_not(), allow_module_level=True)
import opd.torch  # noqa: E402,F401

nn = torch.nn


def _compiled(m, backend, caplog, *args):
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="opd.compile"):
        want = m(*args)
        got = torch.compile(m, backend=backend, dynamic=False)(*args)
    fell = [r.getMessage() for r in caplog.records if r.name == "opd.compile"
            and "cut into" not in r.getMessage()]
    return want, got, fell


def test_gather_lowers(c, backend, caplog):
    """torch.gather and Tensor.gather over several dims, of float and
    int64 tensors (BERT gathers its int64 token type ids)."""
    types = nn.Embedding(3, 4)
    types.register_buffer("ids", torch.arange(12).reshape(1, 12) % 3)

    def fn(x, i):
        a = torch.gather(x, 1, i)                               # (2, 5, 4)
        b = x.gather(-1, i[:, :, :2])                           # (2, 5, 2)
        t = torch.gather(types.ids.expand(2, -1), dim=1, index=i[:, :, 0])   # (2, 5)
        return a + b.sum(-1, keepdim=True) + types(t)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 7, 4, generator=g)
    i = torch.randint(0, 4, (2, 5, 4), generator=g)
    want, got, fell = _compiled(fn, backend, caplog, x, i)
    torch.testing.assert_close(got, want)
    assert fell == [], fell
    assert len(backend.last.opd_parts) == 1


class _Attn(nn.Module):
    """nn.MultiheadAttention called as a model would, with its options."""

    def __init__(self, batch_first, cross=False, **call):
        super().__init__()
        self.mha = nn.MultiheadAttention(32, 4, batch_first=batch_first,
                                         kdim=24 if cross else None, vdim=24 if cross else None)
        self.cross, self.call = cross, call

    def forward(self, x, mem):
        kv = mem if self.cross else x
        out, w = self.mha(x, kv, kv, **self.call)
        return out if w is None else (out, w)


def _mha_case(batch_first, **kw):
    g = torch.Generator().manual_seed(0)
    shape = (2, 5, 32) if batch_first else (5, 2, 32)
    x = torch.randn(*shape, generator=g)
    mem = torch.randn(*(shape[:2] + (24,)), generator=g)
    return x, mem


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("case", ["self", "cross", "bool_mask", "float_mask", "causal",
                                  "unbatched", "padding", "padding_and_mask"])
def test_multihead_attention_lowers(c, backend, caplog, batch_first, case):
    """nn.MultiheadAttention without its weights (need_weights=False):
    one opd graph (linear, views, sdpa, linear), eager's result."""
    torch.manual_seed(0)
    x, mem = _mha_case(batch_first)
    call = {"need_weights": False}
    if case == "bool_mask":
        call["attn_mask"] = torch.rand(5, 5) < 0.3
        call["attn_mask"][:, 0] = False            # every query sees a key
    elif case == "float_mask":
        call["attn_mask"] = torch.randn(2 * 4, 5, 5)
    elif case == "causal":
        call["attn_mask"] = nn.Transformer.generate_square_subsequent_mask(5)
        call["is_causal"] = True
    if case.startswith("padding"):                 # the last key of batch 1 ignored
        call["key_padding_mask"] = torch.tensor([[False] * 5, [False] * 4 + [True]])
        if case == "padding_and_mask":
            call["attn_mask"] = torch.rand(5, 5) < 0.3
            call["attn_mask"][:, 0] = False
    m = _Attn(batch_first, cross=case == "cross", **call).eval()
    if case == "unbatched":
        x = x[0] if batch_first else x[:, 0]
    want, got, fell = _compiled(m, backend, caplog, x, mem)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert fell == [], fell
    assert len(backend.last.opd_parts) == 1


@pytest.mark.parametrize("average", [True, False])
def test_multihead_attention_weights_are_written_out(c, backend, caplog, average):
    """need_weights=True with the weights read: softmax(q kᵀ / √D + mask)
    written out (a float attn_mask and a key_padding_mask), averaged over
    heads or not; outputs and weights equal eager's."""
    torch.manual_seed(0)
    x, mem = _mha_case(False)
    m = _Attn(False, need_weights=True, average_attn_weights=average,
              attn_mask=torch.randn(5, 5),
              key_padding_mask=torch.tensor([[0.0] * 4 + [-math.inf], [0.0] * 5])).eval()
    want, got, fell = _compiled(m, backend, caplog, x, mem)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert fell == [], fell
    assert len(backend.last.opd_parts) == 1


def test_multihead_attention_it_cannot_write_out_stays_torch(c, backend, caplog):
    """bias_k / bias_v (add_bias_kv) keep the fused call in torch, named in
    the log; the result is eager's."""
    torch.manual_seed(0)
    x, mem = _mha_case(False)
    m = _Attn(False, need_weights=False).eval()
    m.mha = nn.MultiheadAttention(32, 4, add_bias_kv=True).eval()
    want, got, fell = _compiled(m, backend, caplog, x, mem)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert any("multi_head_attention_forward: no opd op" in f for f in fell), fell


def test_masks_pads_and_indexing_by_a_buffer_lower(c, backend, caplog):
    """Swin's pieces: masked_fill and torch.where with numbers, zeros_like,
    F.pad by positive and negative amounts (value too), and a table
    indexed by an int64 buffer (its relative position bias)."""
    import torch.nn.functional as F

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = nn.Parameter(torch.randn(13, 3))
            self.register_buffer("index", (torch.arange(20) * 7) % 13)
            self.register_buffer("cube", torch.randn(4, 5, 6))
            self.register_buffer("two", torch.tensor([3, 1]))
            self.register_buffer("hole", torch.rand(4, 5, 3) < 0.3)

        def forward(self, x):
            bias = self.table[self.index].view(4, 5, 3)              # (4, 5, 3)
            h = x.masked_fill(self.hole, -100.0) + bias
            h = torch.where(self.hole[:1], 0.0, h) + torch.zeros_like(h)
            p = F.pad(h, (1, 2, 0, -1), value=0.25)                  # (4, 4, 6)
            t = self.cube[self.two]                                  # (2, 5, 6)
            return p.sum(0) + F.pad(x, (0, 0, 1, 0)).sum() + t.sum(0)[:4]
    x = torch.randn(4, 5, 3)
    want, got, fell = _compiled(M().eval(), backend, caplog, x)
    torch.testing.assert_close(got, want)
    assert fell == [], fell
    assert len(backend.last.opd_parts) == 1


def test_indexing_by_a_runtime_tensor_stays_torch(c, backend, caplog):
    """x[i] with i an input (its negative values would wrap in torch) and
    F.pad in reflect mode stay torch's, logged; the result is eager's."""
    import torch.nn.functional as F

    def fn(x, i):
        return x[i].relu() + F.pad(x, (1, 1), mode="reflect")[:, 1:-1][i]
    x, i = torch.randn(5, 4), torch.tensor([0, -1, 3])
    want, got, fell = _compiled(fn, backend, caplog, x, i)
    torch.testing.assert_close(got, want)
    assert any("not a constant of the graph" in f for f in fell), fell
    assert any("'reflect' mode" in f for f in fell), fell


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_integer_arithmetic_lowers(c, backend, caplog, dtype):
    """add / sub (alpha too) / mul of integer tensors and Python ints
    (torch's promotion keeps the tensor's dtype): one graph, eager's
    values to the bit, wraparound included."""
    def fn(i, j):
        k = i * 3 + j - 1
        return torch.sub(k * j, i, alpha=2) + 7
    g = torch.Generator().manual_seed(0)
    hi = 200 if dtype == torch.uint8 else 2 ** 20
    i = torch.randint(0, hi, (4, 6), generator=g).to(dtype)
    j = torch.randint(0, hi, (6,), generator=g).to(dtype)
    want, got, fell = _compiled(fn, backend, caplog, i, j)
    assert got.dtype == dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert fell == [], fell
    assert len(backend.last.opd_parts) == 1


def test_mixed_integer_dtypes_stay_torch(c, backend, caplog):
    """int32 + int64 (torch promotes to int64; opd's add takes one dtype)
    and an int tensor times a float number (a float result) stay torch's."""
    def fn(i, j):
        return (i + j) * 2, i * 0.5
    i, j = torch.arange(6, dtype=torch.int32), torch.arange(6)
    want, got, fell = _compiled(fn, backend, caplog, i, j)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert any("dtype int32" in f for f in fell), fell


def test_comparisons_lower(c, backend, caplog):
    """==, !=, <, <=, >, >= of tensors and of a tensor and a number (float
    and integer tensors), as operators, torch functions and methods,
    feeding where / masked_fill: one graph, eager's values."""
    def fn(x, y, i):
        a = torch.where(x > 0.5, x, -x) + torch.where(i == 3, 1.0, 0.0)
        b = x.masked_fill(x.lt(-0.2), 0.0) * torch.where(torch.ge(x, y), 2.0, 1.0)
        e = torch.where((i != 2) == (i <= 4), x, y) + x.where(x > 0, -1.0)
        return a + b + e + torch.where(0.1 >= y, y, x)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(3, 8, generator=g), torch.randn(8, generator=g)
    i = torch.randint(0, 6, (3, 1), generator=g)
    want, got, fell = _compiled(fn, backend, caplog, x, y, i)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert fell == [], fell
    assert len(backend.last.opd_parts) == 1
