"""The rewrites of opd._fxnorm on dynamo graphs: each keeps the graph's
result in torch (run here as torch runs it, with no daemon) and leaves the
form the lowering takes."""
import math
import operator

import pytest
import torch
import torch.nn.functional as F

from opd import _fxnorm

pytestmark = pytest.mark.skipif(not hasattr(torch, "compile"),
                                reason="needs torch >= 2.4")


def _rewritten(fn, *args):
    """fn compiled with a backend that applies normalize(); returns (the
    counts, the rewritten graph's call targets, the compiled result)."""
    seen = {}

    def backend(gm, example_inputs):
        seen["counts"] = _fxnorm.normalize(gm)
        seen["targets"] = [n.target for n in gm.graph.nodes
                           if n.op in ("call_function", "call_method")]
        return gm.forward
    torch._dynamo.reset()
    out = torch.compile(fn, backend=backend, dynamic=False)(*args)
    return seen["counts"], seen["targets"], out


def test_written_out_tanh_gelu_becomes_one_gelu():
    def fn(x):           # GPT-2's NewGELUActivation
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                           (x + 0.044715 * torch.pow(x, 3.0))))
    x = torch.randn(4, 32)
    counts, targets, out = _rewritten(fn, x)
    assert counts["gelu_tanh"] == 1
    assert targets == [F.gelu], targets
    torch.testing.assert_close(out, fn(x), atol=1e-6, rtol=1e-6)


def test_a_near_miss_is_left_alone():
    def fn(x):           # 0.045, not 0.044715: not GELU
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                           (x + 0.045 * torch.pow(x, 3.0))))
    x = torch.randn(4, 32)
    counts, targets, out = _rewritten(fn, x)
    assert counts["gelu_tanh"] == 0 and F.gelu not in targets
    torch.testing.assert_close(out, fn(x))


def test_split_pieces_become_narrow():
    def fn(x):
        q, k, v = x.split(4, dim=2)
        a, b = x.chunk(2, dim=-1)
        return q * 2 + k - v, a + b
    x = torch.randn(2, 3, 12)
    counts, targets, out = _rewritten(fn, x)
    assert counts["split"] == 5
    assert targets.count(torch.narrow) == 5 and "split" not in targets
    for got, want in zip(out, fn(x)):
        torch.testing.assert_close(got, want)


def test_positions_fold_into_a_constant_and_inputs_never_do():
    w = torch.randn(16, 8)

    def fn(x):
        pos = torch.arange(x.shape[1]) + 0
        return F.embedding(pos.unsqueeze(0), w) + x * 1.0
    x = torch.randn(1, 10, 8)
    counts, targets, out = _rewritten(fn, x)
    assert counts["fold"] >= 1
    assert torch.arange not in targets and "unsqueeze" not in targets
    assert operator.mul in targets               # x * 1.0 reads the input
    torch.testing.assert_close(out, fn(x))


def test_cat_drops_empty_inputs():
    def fn(x):
        empty = torch.tensor([], dtype=torch.float32)
        return torch.cat([empty, x], dim=-2) * 2, torch.cat([x, x, empty.reshape(1, 0, 4)], 1)
    x = torch.randn(1, 3, 4)
    counts, targets, out = _rewritten(fn, x)
    assert counts["cat"] == 2
    assert targets.count(torch.cat) == 1           # the [x, x] one
    for got, want in zip(out, fn(x)):
        torch.testing.assert_close(got, want)


def test_in_place_calls_on_fresh_tensors_become_out_of_place():
    def fn(x, y):        # torchvision's BasicBlock: relu(inplace), out += identity
        h = F.relu(x * 2, inplace=True)
        h += y
        h = torch.relu_(h * 3)
        return h.add_(1) - y
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    counts, targets, out = _rewritten(fn, x, y)
    assert counts["inplace"] == 4, counts
    assert operator.iadd not in targets and "add_" not in targets
    assert torch.relu_ not in targets
    torch.testing.assert_close(out, fn(x, y))


def test_in_place_calls_on_inputs_and_views_stay_in_place():
    def fn(x):           # writes the caller's x, and a view of a fresh tensor
        F.relu(x, inplace=True)
        h = x * 2
        v = h.view(2, 16)
        v += 1           # h changes too: must stay in place
        return h
    x = torch.randn(4, 8)
    want_x = x.clone()
    want = fn(want_x)
    counts, targets, out = _rewritten(fn, x)
    assert counts["inplace"] == 0, counts
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(x, want_x)   # the input was written, as eager does


def test_later_readers_of_a_written_tensor_read_the_result():
    def fn(x):
        h = x + 1
        a = h * 2        # before the write: the old h
        h.mul_(3)
        return a + h     # after: the written h
    x = torch.randn(5)
    counts, targets, out = _rewritten(fn, x)
    assert counts["inplace"] == 1
    torch.testing.assert_close(out, fn(x))


def test_an_in_place_call_seen_through_a_view_stays():
    def fn(x):
        h = x * 2
        v = h.view(-1)
        h.relu_()            # v sees it in eager
        return v + 1
    x = torch.randn(4, 8)
    counts, targets, out = _rewritten(fn, x)
    assert counts["inplace"] == 0, counts
    torch.testing.assert_close(out, fn(x))


def test_a_constant_filled_by_setitems_folds_with_its_writes():
    def fn(x):           # Swin's shifted-window mask: new_zeros, then filled
        m = x.new_zeros((4, 4))
        m[:2, :2] = 1.0
        m[2:, 2:] = 2.0
        return x + m.view(16).sum()
    x = torch.randn(3)
    counts, targets, out = _rewritten(fn, x)
    assert counts["fold"] == 1 and operator.setitem not in targets, targets
    torch.testing.assert_close(out, fn(x))
    torch.testing.assert_close(out, x + 12.0)
    out2 = torch.compile(fn, backend=lambda gm, ex: (_fxnorm.normalize(gm), gm.forward)[1],
                         dynamic=False)(x)
    torch.testing.assert_close(out2, x + 12.0)    # a second call: nothing carried


def test_a_constant_written_with_runtime_values_or_read_before_is_not_folded():
    def runtime(x):      # the value written comes from x: stays torch's
        m = x.new_zeros((3,))
        m[1:3] = x[0]
        return x.sum() + m
    x = torch.randn(3)
    counts, targets, out = _rewritten(runtime, x)
    assert operator.setitem in targets and counts["fold"] == 0, (counts, targets)
    torch.testing.assert_close(out, runtime(x))

    def early(x):        # a view read by torch before the last write
        m = x.new_zeros((3,))
        v = m[1:]
        a = x[1:] * v    # torch reads the view before the writes
        m[0] = 5.0
        m[1] = 2.0
        return a.sum() + m
    counts, targets, out = _rewritten(early, x)
    assert operator.setitem in targets, targets
    torch.testing.assert_close(out, early(x))
