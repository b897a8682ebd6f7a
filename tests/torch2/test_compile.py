"""torch.compile(backend="opd") on the CPU against a real daemon (torch >=
2.4; with an older torch, Debian's 1.13, every test skips): a small MLP
and a small transformer-style block give eager's outputs within 1e-5;
the MLP's graph is one opd graph, defined once and reused across calls
(one prepared request), and its results equal the same ops run one by
one through opd bit for bit; a node opd cannot run stays in torch and is
logged once with its reason; publish_module's tensors are the graph's
constants, attach_module reads them back on another client, and a
parameter changed in place is picked up without a new definition."""
import logging

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import opd  # noqa: E402
import opd.dynamo  # noqa: E402

if not opd.dynamo.available():
    pytest.skip(opd.dynamo.why_not(), allow_module_level=True)

import opd.torch  # noqa: E402

nn, F = torch.nn, torch.nn.functional


def _mlp(act=nn.ReLU):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), act(), nn.Linear(32, 32), act(),
                         nn.Linear(32, 4)).eval()


class Block(nn.Module):
    """Pre-norm attention and MLP, one head (x: (B, T, C))."""

    def __init__(self, c=16):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.fc, self.out = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.c = c

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).split(self.c, dim=-1)
        att = torch.softmax(q @ k.transpose(-2, -1) / self.c ** 0.5, dim=-1)
        x = x + self.proj(att @ v)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


def test_the_backend_is_registered_by_name(c):
    assert "opd" in torch._dynamo.list_backends()
    opd.torch.register(c)
    m = _mlp()
    f = torch.compile(m, backend="opd")
    x = torch.randn(2, 16)
    with torch.no_grad():
        torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-5)


def test_mlp_is_one_graph_and_matches_eager(c, backend):
    m = _mlp(nn.GELU)
    f = torch.compile(m, backend=backend)
    for _ in range(3):
        x = torch.randn(8, 16)
        with torch.no_grad():
            torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-5)
    parts = backend.last.opd_parts
    assert len(parts) == 1 and backend.last.opd_fallbacks == []
    assert backend.compiled == 1


def test_graph_is_defined_once_and_reused(c, backend):
    m = _mlp()
    f = torch.compile(m, backend=backend)
    x = torch.randn(4, 16)
    with torch.no_grad():
        f(x)
        g = backend.last.opd_parts[0].graph
        st = c.stats()["graphs"]
        for _ in range(5):
            x = torch.randn(4, 16)
            torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-5)
        after = c.stats()["graphs"]
    assert after["defined"] == st["defined"] and after["live"] == st["live"]
    assert after["runs"] - st["runs"] == 5
    assert g.prepares == 1 and backend.compiled == 1
    # a parameter updated in place: the next call sees it, same graph
    with torch.no_grad():
        m[0].weight.mul_(-1)
        torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-5)
    assert c.stats()["graphs"]["defined"] == st["defined"]


def _per_op(c, m, x):
    """The ReLU MLP through opd one op at a time, as the backend lowers it
    (linear with a fused relu where the daemon has linear, else matmul
    with the transposed weight, add, relu)."""
    h = c.from_numpy(x.numpy())
    layers = [l for l in m if isinstance(l, nn.Linear)]
    for i, l in enumerate(layers):
        w = l.weight.detach().numpy()
        b = c.from_numpy(l.bias.detach().numpy())
        relu = i < len(layers) - 1
        if "linear" in c.ops():
            h = c.linear(h, c.from_numpy(w), b, act="relu" if relu else "none")
        else:
            h = c.add(c.matmul(h, c.from_numpy(np.ascontiguousarray(w.T))), b)
            h = c.relu(h) if relu else h
    return h.numpy()


def test_graph_results_equal_per_op_results_bit_for_bit(c, backend):
    m = _mlp()
    f = torch.compile(m, backend=backend)
    for _ in range(3):
        x = torch.randn(5, 16)
        with torch.no_grad():
            y = f(x)
        assert y.numpy().tobytes() == _per_op(c, m, x).tobytes()


def test_transformer_block_matches_eager(c, backend):
    torch.manual_seed(1)
    blk = Block().eval()
    f = torch.compile(blk, backend=backend)
    for _ in range(2):
        x = torch.randn(2, 8, 16)
        with torch.no_grad():
            torch.testing.assert_close(f(x), blk(x), atol=1e-5, rtol=1e-5)
    parts = backend.last.opd_parts
    nodes = sum(len(p.graph._nodes) for p in parts)
    assert nodes >= 10, [p.graph for p in parts]
    whats = [w for w, _ in backend.last.opd_fallbacks]
    if "permute" in c.ops():    # the transpose lowers onto permute: one graph
        assert len(parts) == 1, [p.graph for p in parts]
        assert not any("transpose" in w for w in whats), backend.last.opd_fallbacks
    else:
        assert len(parts) >= 2
        assert any("transpose" in w for w in whats), backend.last.opd_fallbacks


def test_fallbacks_are_logged_once_with_their_reason(c, backend, caplog):
    def fn(x):
        e = torch.cumsum(x, 0)                  # no opd op
        s = torch.pow(x.abs(), 0.5)             # an exponent opd refuses
        return torch.relu(e) + s.sum(0)
    f = torch.compile(fn, backend=backend)
    x = torch.randn(3, 4)
    with caplog.at_level(logging.INFO, logger="opd.compile"):
        out = f(x)
    torch.testing.assert_close(out, fn(x), atol=1e-6, rtol=1e-6)
    msgs = [r.getMessage() for r in caplog.records if r.name == "opd.compile"]
    assert "torch.cumsum: no opd op" in msgs, msgs
    assert "torch.pow: pow with exponent 0.5: opd multiplies for 1..4" in msgs, msgs
    assert len(msgs) == len(set(msgs)), msgs          # once each
    assert len(backend.last.opd_parts) >= 1           # the relu + add ran in opd


def test_publish_module_gives_the_graph_its_constants(c, backend, daemon):
    m = _mlp()
    consts = opd.torch.publish_module(c, m, "torch2-mlp")
    assert set(consts) == {n for n, _ in m.named_parameters()}
    for name, p in m.named_parameters():
        assert consts[name].numpy().tobytes() == p.detach().numpy().tobytes()
    c2 = opd.connect(daemon.socket)
    try:
        same = opd.torch.attach_module(c2, "torch2-mlp")
        assert set(same) == set(consts)
        for name, p in m.named_parameters():
            t = same[name]
            assert t.readonly and t.shape == tuple(p.shape)
            assert t.numpy().tobytes() == p.detach().numpy().tobytes()
        with pytest.raises(opd.BadArgumentError):
            opd.torch.attach_module(c2, "torch2-nothing")
    finally:
        c2.close()
    f = torch.compile(m, backend=backend)
    x = torch.randn(3, 16)
    with torch.no_grad():
        torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-5)
    g = backend.last.opd_parts[0].graph
    used = {id(v.source) for v in g._consts}
    if "linear" in c.ops():      # the weights as published (matmul: transposed)
        assert id(consts["0.weight"]) in used
    assert id(consts["0.bias"]) in used
    c.unpublish("torch2-mlp")
    with torch.no_grad():                            # the graph holds them
        torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-5)


class Mixed(nn.Module):
    """linear + silu, tanh, sigmoid, sub, div, rms_norm and a tanh gelu:
    ops a daemon may or may not have."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 32)
        self.n = nn.RMSNorm(32) if hasattr(nn, "RMSNorm") else nn.LayerNorm(32)

    def forward(self, x):
        h = F.silu(self.a(x))
        h = torch.tanh(self.b(h)) - torch.sigmoid(h) / 2.0
        return 1.0 - self.n(h) * 3 + F.gelu(h, approximate="tanh")


def test_ops_the_daemon_lacks_fall_back_and_the_rest_run(c, backend):
    torch.manual_seed(2)
    m = Mixed().eval()
    f = torch.compile(m, backend=backend)
    x = torch.randn(8, 16)
    with torch.no_grad():
        torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-5)
    ops = c.ops()
    reasons = {r for _, r in backend.last.opd_fallbacks}
    ran = [n.op for p in backend.last.opd_parts for n in p.graph._nodes]
    for op in ("silu", "tanh", "sigmoid", "sub", "div"):
        if op in ops:
            fused = op == "silu" and "linear" in ops      # into linear's act
            assert (op in ran) != fused, (op, ran)
            assert not any("no %s op" % op in r for r in reasons), reasons
        else:
            assert "the daemon has no %s op" % op in reasons, reasons
    if "linear" in ops:                # silu fused into the first linear
        assert ran.count("linear") == 2 and "silu" not in ran
        first = [n for p in backend.last.opd_parts for n in p.graph._nodes
                 if n.op == "linear"][0]
        assert first.attrs == {"act": "silu"}
    else:
        assert ran.count("matmul") == 2 and ran.count("add") >= 2


def test_mlp_on_cuda_matches_eager(c, backend):
    if not torch.cuda.is_available() or not c.devices():
        pytest.skip("needs a CUDA device in torch and in the daemon")
    m = _mlp(nn.GELU).cuda()
    f = torch.compile(m, backend=backend)
    for _ in range(3):
        x = torch.randn(8, 16, device="cuda")
        with torch.no_grad():
            torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-5)
    parts = backend.last.opd_parts
    assert len(parts) == 1 and parts[0].graph.device == "cuda:0"


def test_gru_cell_runs_in_opd_where_the_daemon_has_it(c, backend):
    torch.manual_seed(3)
    cell = nn.GRUCell(8, 16).eval()
    f = torch.compile(cell, backend=backend)
    for _ in range(3):
        x, h = torch.randn(4, 8), torch.randn(4, 16)
        with torch.no_grad():
            torch.testing.assert_close(f(x, h), cell(x, h), atol=1e-5, rtol=1e-5)
    ran = [n.op for p in backend.last.opd_parts for n in p.graph._nodes]
    if "gru_cell" in c.ops():
        assert ran == ["gru_cell"], ran
    else:
        assert ran == [] and backend.last.opd_fallbacks == [
            ("torch.gru_cell", "the daemon has no gru_cell op")], backend.last.opd_fallbacks


def _relus(x):                   # 1100 nodes: over the daemon's 1024 per graph
    for _ in range(1100):
        x = torch.relu(x)
    return x


def test_a_subgraph_over_the_limits_is_cut_into_graphs(c, backend):
    f = torch.compile(_relus, backend=backend)
    x = torch.randn(4)
    torch.testing.assert_close(f(x), _relus(x))
    assert len(backend.last.opd_parts) == 3     # 512 + 512 + 76 nodes
    assert backend.last.opd_fallbacks == []


def test_a_subgraph_the_daemon_refuses_stays_in_torch(c, backend, caplog,
                                                       monkeypatch):
    from opd import _fxgraph
    monkeypatch.setattr(_fxgraph, "CHUNK_NODES", 4096)   # not cut: refused
    fn = _relus
    f = torch.compile(fn, backend=backend)
    x = torch.randn(4)
    with caplog.at_level(logging.INFO, logger="opd.compile"):
        torch.testing.assert_close(f(x), fn(x))
    assert backend.last.opd_parts == []
    (what, why), = backend.last.opd_fallbacks
    assert "the daemon refused it as a graph" in why and "1024" in why, why
    assert any("refused" in r.getMessage() for r in caplog.records)
    c.ping()


def test_with_autograd_everything_stays_in_torch(c, backend):
    m = _mlp()
    f = torch.compile(m, backend=backend)
    x = torch.randn(3, 16)
    y = f(x)                                   # grad enabled: parameters need it
    torch.testing.assert_close(y, m(x))
    assert backend.last.opd_parts == []
    assert all("needs autograd" in r for _, r in backend.last.opd_fallbacks)
    y.sum().backward()                         # still differentiable
    assert m[0].weight.grad is not None
