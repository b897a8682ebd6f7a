"""bench/bench_models.py, bench/bench_chain.py and probe_chain.py (a probe
kept with its record, docs/records/2026-12-01-stream-ordered-cost/)
without a GPU: they skip with exit 0 when torch sees no CUDA device,
refuse bad options, and the
module swaps bench_models makes (LayerNorm, the MLP activation, the
attention softmax, ReLU, 3x3 Conv2d -> torch.ops.opd.*) call the ops the
expected number of times, give torch's result and leave torch untouched.

DESIGN
The swaps are checked with a stand-in for torch.ops.opd (bm.OPS) made of
torch functions that assert the attribute names and types opd's schemas
take, on a small model shaped like transformers' GPT-2 (h[i].ln_1, .attn
calling nn.functional.softmax, .ln_2, .mlp.act, ln_f); the real models and
the real ops run on the GPU machine (bench/models.sh).
"""
import ctypes
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "bench"))
RECORD = os.path.join("docs", "records", "2026-12-01-stream-ordered-cost")

import bench_models as bm  # noqa: E402


def script(name, *args):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")   # no GPU, even on one
    where = "bench" if os.path.exists(os.path.join(REPO, "bench", name)) else RECORD
    return subprocess.run([sys.executable, os.path.join(REPO, where, name), *args],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("name", ["bench_models.py", "bench_chain.py", "probe_chain.py"])
def test_skips_without_cuda(name):
    r = script(name)
    assert r.returncode == 0, r.stderr
    assert "skipped" in r.stdout and "CUDA" in r.stdout, r.stdout


def test_bad_options():
    r = script("bench_models.py", "--models", "gpt2,vgg")
    assert r.returncode == 2 and "--models: unknown vgg" in r.stderr, r.stderr
    r = script("bench_chain.py", "--shape", "1x0")
    assert r.returncode == 2 and "every dim must be at least 1" in r.stderr, r.stderr
    r = script("bench_chain.py", "--rounds", "0")
    assert r.returncode == 2 and "--rounds must be at least 1" in r.stderr, r.stderr
    r = script("probe_chain.py", "--calls", "0")
    assert r.returncode == 2 and "--calls must be at least 1" in r.stderr, r.stderr
    for name in ("bench_models.py", "bench_chain.py"):
        r = script(name, "--legacy", "fork,sideways")
        assert r.returncode == 2 and "--legacy: unknown sideways" in r.stderr, r.stderr


def test_legacy_setter(monkeypatch):
    """_torchbench.legacy_setter drives libopd's opd__stream_legacy (the
    process's OPD_STREAM_LEGACY mode) in the library $OPD_LIB names (a
    bench build: make BENCH=1)."""
    import _torchbench as tb
    lib = os.environ.get("OPD_LIB") or os.path.join(REPO, "build", "libopd.so")
    if not os.path.exists(lib):
        pytest.skip("no libopd.so at %s" % lib)
    if not hasattr(ctypes.CDLL(lib), "opd__stream_legacy"):
        pytest.skip("%s is not a bench build (make BENCH=1)" % lib)
    monkeypatch.setenv("OPD_LIB", lib)
    set_legacy = tb.legacy_setter()
    start = set_legacy(None)
    assert start in tb.LEGACY_MODES
    try:
        for m in tb.LEGACY_MODES:
            assert set_legacy(m) == m and set_legacy(None) == m
        with pytest.raises(RuntimeError, match="sideways"):
            set_legacy("sideways")
        assert set_legacy(None) == tb.LEGACY_MODES[-1]    # unchanged by the refusal
    finally:
        set_legacy(start)
    # the environment's word, read once; an unknown one is said and ignored
    code = ("import sys; sys.path.insert(0, %r); import _torchbench as tb; "
            "print(tb.legacy_setter()(None))" % os.path.join(REPO, "bench"))
    for word, want in (("fork", "fork"), ("sideways", "pdl")):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=dict(os.environ, OPD_LIB=lib, OPD_STREAM_LEGACY=word),
                           timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == want, (r.stdout, r.stderr)
        assert ("is not direct, side, fork, busy, word, kernel or pdl: using pdl" in r.stderr) == (
            word == "sideways"), r.stderr


class StandIn:
    """torch.ops.opd's ops used by bench_models, as torch functions."""

    def layernorm(self, x, weight=None, bias=None, *, eps=1e-5):
        assert isinstance(eps, float)
        return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)

    def gelu(self, x, *, approximate="none"):
        assert approximate == "tanh"
        return F.gelu(x, approximate="tanh")

    def softmax(self, x, *, dim=-1):
        assert dim == -1
        return torch.softmax(x, -1)

    def relu(self, x):
        return torch.relu(x)

    def relu_(self, x):
        torch.relu_(x)

    def conv2d(self, x, weight, bias=None, *, stride, padding, dilation):
        for v in (stride, padding, dilation):
            assert isinstance(v, list) and all(isinstance(i, int) for i in v)
        return F.conv2d(x, weight, bias, stride, padding, dilation)


@pytest.fixture
def standin(monkeypatch):
    monkeypatch.setattr(bm, "torch", torch)
    monkeypatch.setattr(bm, "OPS", StandIn())
    bm.COUNTS.clear()
    yield
    bm.COUNTS.clear()


class Attn(nn.Module):
    def __init__(self, fail=False, dim=-1):
        super().__init__()
        self.fail, self.dim = fail, dim

    def forward(self, h):
        a = nn.functional.softmax(h @ h.transpose(-1, -2), dim=self.dim)
        if self.fail:
            raise RuntimeError("attention failed")
        return a @ h


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.GELU(approximate="tanh")

    def forward(self, h):
        return self.act(h)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(c), Attn()
        self.ln_2, self.mlp = nn.LayerNorm(c), MLP()

    def forward(self, h):
        h = h + self.attn(self.ln_1(h))
        return h + self.mlp(self.ln_2(h))


class Tiny(nn.Module):
    def __init__(self, layers=3, c=16):
        super().__init__()
        self.h = nn.ModuleList([Block(c) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(c)

    def forward(self, x):
        for b in self.h:
            x = b(x)
        return self.ln_f(x)


def swapped(mt):
    import copy
    mo = copy.deepcopy(mt)
    LayerNorm, Gelu, _, _ = bm.wrappers()
    n = bm.replace(mo, lambda m: isinstance(m, nn.LayerNorm), LayerNorm)
    for b in mo.h:
        b.mlp.act = Gelu()
        bm.wrap_attention(b.attn)
    return mo, n


def test_gpt2_shaped_swaps(standin):
    torch.manual_seed(0)
    mt = Tiny().eval()
    mo, n = swapped(mt)
    assert n == 7
    assert mo.h[0].ln_1.weight is not mt.h[0].ln_1.weight   # a copy...
    assert torch.equal(mo.h[0].ln_1.weight, mt.h[0].ln_1.weight)   # ...of it
    x = torch.randn(2, 5, 16)
    softmax = F.softmax
    with torch.no_grad():
        counts = bm.calls_per_forward(lambda m: m(x), mo)
        assert counts == {"layernorm": 7, "gelu": 3, "softmax": 3}
        assert F.softmax is softmax
        torch.testing.assert_close(mo(x), mt(x))
        bm.COUNTS.clear()
        mt(x)                     # the torch model calls nothing of opd's
        assert bm.COUNTS == {}


def test_softmax_patch_restored_and_falls_back(standin):
    torch.manual_seed(0)
    mt = Tiny(layers=1).eval()
    mo, _ = swapped(mt)
    x = torch.randn(2, 5, 16)
    softmax = F.softmax
    mo.h[0].attn.fail = True
    with pytest.raises(RuntimeError, match="attention failed"):
        mo(x)
    assert F.softmax is softmax
    mo.h[0].attn.fail = False
    mo.h[0].attn.dim = 1            # not the last dim: torch's softmax runs
    mt.h[0].attn.dim = 1
    with torch.no_grad():
        counts = bm.calls_per_forward(lambda m: m(x), mo)
        assert counts.get("softmax_torch") == 1 and "softmax" not in counts
        torch.testing.assert_close(mo(x), mt(x))


def test_resnet18_swaps(standin):
    pytest.importorskip("torchvision")
    mt, mo, run, desc, expect = bm.build_resnet18(torch.device("cpu"), True)
    assert expect == {"relu_": 17, "conv2d": 16}
    assert "16 3x3 Conv2d" in desc
    with torch.no_grad():
        assert bm.calls_per_forward(run, mo) == expect
