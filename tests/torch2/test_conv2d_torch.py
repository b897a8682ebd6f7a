"""torch.ops.opd.conv2d with F.conv2d's semantics (torch >= 2.4): groups,
depthwise, unbatched input, padding_mode "same" / "valid", stride and
dilation equal F.conv2d and pass torch.library.opcheck; a
depthwise-separable CNN under torch.compile(backend="opd") lowers its
convs (groups, padding='same', nn.Conv2d and F.conv2d) into one opd graph
with eager's outputs; and bad input raises the daemon's message."""
import logging

import pytest

torch = pytest.importorskip("torch")
import opd  # noqa: E402
import opd.dynamo  # noqa: E402

if not opd.dynamo.available():
    pytest.skip(opd.dynamo.why_not(), allow_module_level=True)
import opd.torch  # noqa: E402,F401

nn, F = torch.nn, torch.nn.functional

# (x shape, weight shape, F.conv2d kwargs): padding strings go to opd as
# padding_mode
CASES = [
    ((2, 4, 9, 8), (6, 2, 3, 3), {"groups": 2, "padding": 1}),
    ((1, 8, 12, 12), (8, 1, 3, 3), {"groups": 8, "padding": 1}),
    ((2, 6, 11, 10), (12, 1, 3, 3), {"groups": 6, "stride": 2, "padding": 1}),
    ((1, 6, 10, 9), (3, 2, 3, 2), {"groups": 3, "stride": [1, 2], "padding": [2, 1],
                                   "dilation": [2, 1]}),
    ((7, 8, 9), (7, 1, 5, 5), {"groups": 7, "padding": 2}),
    ((4, 6, 6), (5, 4, 3, 3), {}),
    ((2, 3, 8, 7), (4, 3, 2, 2), {"padding": "same"}),
    ((1, 4, 9, 9), (4, 1, 4, 3), {"groups": 4, "padding": "same", "dilation": [2, 1]}),
    ((4, 7, 6), (4, 2, 2, 4), {"groups": 2, "padding": "same"}),
    ((2, 3, 8, 7), (4, 3, 3, 3), {"padding": "valid", "stride": 2}),
]


def opd_kwargs(kw):
    kw = dict(kw)
    for k in ("stride", "padding", "dilation"):
        if isinstance(kw.get(k), int):
            kw[k] = [kw[k]]
    if isinstance(kw.get("padding"), str):
        kw["padding_mode"] = kw.pop("padding")
    return kw


def tensors(dev, xs, ws):
    g = torch.Generator().manual_seed(len(xs) * 100 + ws[0])
    x, w, b = (torch.randn(s, generator=g) for s in (xs, ws, (ws[0],)))
    return x.to(dev), w.to(dev), b.to(dev)


def test_results_equal_f_conv2d(tc, devs):
    for dev in devs:
        for xs, ws, kw in CASES:
            x, w, b = tensors(dev, xs, ws)
            got = torch.ops.opd.conv2d(x, w, b, **opd_kwargs(kw))
            want = F.conv2d(x, w, b, **kw)
            assert got.shape == want.shape, (xs, ws, kw)
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_opcheck(tc, devs):
    for dev in devs:
        for xs, ws, kw in CASES[1::2]:
            x, w, b = tensors(dev, xs, ws)
            torch.library.opcheck(torch.ops.opd.conv2d.default, (x, w, b), opd_kwargs(kw))


def test_errors_name_the_problem(tc):
    x, w = torch.randn(1, 6, 8, 8), torch.randn(4, 2, 3, 3)
    with pytest.raises(Exception, match="groups=4"):
        torch.ops.opd.conv2d(x, w, groups=4)
    with pytest.raises(Exception, match="stride 1"):
        torch.ops.opd.conv2d(x, torch.randn(4, 6, 3, 3), padding_mode="same", stride=[2])


class DWSep(nn.Module):
    """MobileNet's depthwise-separable block: a depthwise 3x3 (groups = C)
    with padding='same' or 1, batch norm, ReLU, then a pointwise 1x1; a
    grouped conv; and a functional depthwise F.conv2d with an even
    kernel and padding='same'."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False)
        self.dw1 = nn.Conv2d(16, 16, 3, padding="same", groups=16, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.pw1 = nn.Conv2d(16, 32, 1)
        self.dw2 = nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=32)
        self.grp = nn.Conv2d(32, 32, 3, padding=1, groups=4)
        self.dw3 = nn.Parameter(torch.randn(32, 1, 2, 2) * 0.3)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(32, 10)
        self.bn1.running_mean.uniform_(-0.5, 0.5)
        self.bn1.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        x = F.relu(self.stem(x))
        x = F.relu(self.pw1(F.relu(self.bn1(self.dw1(x)))))
        x = F.relu(self.grp(F.relu(self.dw2(x))))
        x = F.conv2d(x, self.dw3, padding="same", groups=32)
        return self.fc(torch.flatten(self.pool(x), 1))


def test_a_depthwise_separable_cnn_is_one_graph(c, backend, caplog):
    missing = {"conv2d", "batch_norm", "adaptive_avg_pool2d", "reshape",
               "linear"} - set(c.ops())
    if missing:
        pytest.skip("the daemon lacks %s" % sorted(missing))
    torch.manual_seed(0)
    m = DWSep().eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="opd.compile"):
        want = m(x)
        got = torch.compile(m, backend=backend, dynamic=False)(x)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    fell = [r.getMessage() for r in caplog.records if r.name == "opd.compile"]
    assert fell == [], fell
    assert len(backend.last.opd_parts) == 1
    assert backend.last.opd_fallbacks == []


def test_unbatched_and_valid_convs_compile_to_opd(c, backend, caplog):
    """F.conv2d on a (C, H, W) input, grouped with padding='valid', then
    depthwise with padding='same' and a dilation: one opd graph."""
    torch.manual_seed(1)
    w1, w2 = torch.randn(8, 2, 3, 3), torch.randn(8, 1, 2, 3)

    def f(x):
        y = F.relu(F.conv2d(x, w1, padding="valid", groups=2))
        return F.conv2d(y, w2, padding="same", groups=8, dilation=2)

    x = torch.randn(4, 10, 11)
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="opd.compile"):
        want = f(x)
        got = torch.compile(f, backend=backend, dynamic=False)(x)
    assert got.shape == want.shape == (8, 8, 9)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    fell = [r.getMessage() for r in caplog.records if r.name == "opd.compile"]
    assert fell == [], fell
    assert len(backend.last.opd_parts) == 1
