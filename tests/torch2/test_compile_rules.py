"""Rules of the torch.compile backend for what real models call beyond
the element-wise and row-wise ops (opd._fxindex, opd._fxmha): each lowers
into one opd graph with nothing left to torch and gives eager's result,
on the CPU: torch.gather (BERT's token type ids), nn.MultiheadAttention
(torchvision's ViT), masked_fill and slice writes into a fresh tensor
(Swin's attention mask), integer arithmetic."""
import logging

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
