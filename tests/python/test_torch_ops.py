"""opd.torch: every opd operator (built-in and plugin) as torch.ops.opd.<name>,
checked with torch.library.opcheck (schema, fake implementation against
the real one, autograd registration, PT2 tracing) on CPU tensors and, where
the daemon has a GPU, CUDA tensors, for the functional ops, their out=
variants (<name>_out) and in-place forms (<name>_); results against torch's
own ops; the per-signature plans (staging reused, no new arena per call);
a torch.compile(fullgraph=True) trace through the fake implementations.

With torch < 2.4 (Debian's python3-torch 1.13 in CI) `import opd.torch`
must raise one ImportError naming the version needed; that is checked here
and the other tests skip with that message as the reason.
"""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
F = torch.nn.functional

import opd  # noqa: E402

try:
    import opd.torch as ot
    WHY = None
except ImportError as e:
    ot, WHY = None, str(e)

needs_torch24 = pytest.mark.skipif(ot is None, reason=WHY or "")


def test_old_torch_gets_one_clear_error():
    if ot is not None:
        pytest.skip("torch %s: opd.torch imports" % torch.__version__)
    assert WHY == ("opd.torch needs torch >= 2.4 (torch.library.register_fake); "
                   "this is torch %s" % torch.__version__)


@pytest.fixture(scope="module")
def tc(plugin_daemon):
    c = opd.connect(plugin_daemon.socket)
    ot.register(c)
    yield c
    c.close()


def samples(dev):
    """name -> (args, kwargs) of one valid call of each op, on device dev."""
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g).to(dev)

    boxes = torch.rand(12, 2, generator=g) * 10
    boxes = torch.cat([boxes, boxes + 1 + torch.rand(12, 2, generator=g) * 3], 1)
    return {
        "noop": (([r(3), r(2, 2)],), {}),
        "copy": ((r(4, 5),), {}),
        "add": ((r(3, 4), r(4)), {}),
        "mul": ((r(2, 3, 4), r(3, 1)), {}),
        "sub": ((r(3, 4), r(4)), {}),
        "div": ((r(2, 3), r(3).abs() + 1), {}),
        "relu": ((r(17),), {}),
        "gelu": ((r(5, 6),), {"approximate": "tanh"}),
        "silu": ((r(9),), {}),
        "sigmoid": ((r(3, 5),), {}),
        "tanh": ((r(6),), {}),
        "hardtanh": ((r(7),), {"min_val": 0.0, "max_val": 6.0}),
        "hardsigmoid": ((r(7),), {}),
        "hardswish": ((r(7),), {}),
        "neg": ((r(5),), {}),
        "abs": ((r(5),), {}),
        "exp": ((r(5),), {}),
        "log": ((r(5).abs() + 0.1,), {}),
        "sqrt": ((r(5).abs() + 0.1,), {}),
        "rsqrt": ((r(5).abs() + 0.1,), {}),
        "sin": ((r(5),), {}),
        "cos": ((r(5),), {}),
        "softmax": ((r(4, 33),), {"dim": -1}),
        "layernorm": ((r(3, 8), r(8), r(8)), {"eps": 1e-3}),
        "rmsnorm": ((r(3, 8), r(8)), {}),
        "matmul": ((r(3, 4), r(4, 5)), {}),
        "linear": ((r(3, 8), r(5, 8), r(5)), {"act": "gelu"}),
        "gru_cell": ((r(2, 6), r(2, 4), r(12, 6), r(12, 4), r(12), r(12)), {}),
        "conv2d": ((r(1, 2, 6, 5), r(3, 2, 3, 3), r(3)), {"padding": [1]}),
        "nms": ((boxes.to(dev), torch.rand(12, generator=g).to(dev)),
                {"iou_threshold": 0.5}),
        "scale": ((r(6, 7),), {"a": 2.0, "b": -1.0}),
        "conv3x3_bias_relu": ((r(2, 3, 7, 9), r(4, 3, 3, 3), r(4)), {}),
        "permute": ((r(2, 3, 4),), {"dims": [2, 0, 1]}),
        "reshape": ((r(2, 3, 4),), {"shape": [4, -1]}),
        "slice": ((r(5, 6),), {"dim": 1, "start": 1, "end": 5, "step": 2}),
        "cat": (([r(2, 3), r(2, 1)],), {"dim": 1}),
        "embedding": ((r(10, 4), torch.randint(0, 10, (2, 3), generator=g).to(dev)), {}),
        "where": (((r(3, 4) > 0), r(3, 4), r(4)), {}),
        "expand": ((r(3, 1),), {"shape": [2, 3, 5]}),
        "sum": ((r(3, 4, 5),), {"dims": [1]}),
        "mean": ((r(3, 4),), {"dims": [0], "keepdim": True}),
        "amax": ((r(3, 4),), {}),
        "log_softmax": ((r(4, 33),), {"dim": 0}),
        "max_pool2d": ((r(2, 3, 9, 8),), {"kernel": [3], "stride": [2], "padding": [1]}),
        "adaptive_avg_pool2d": ((r(2, 3, 9, 8),), {"size": [2, 3]}),
        "batch_norm": ((r(2, 3, 4, 5), r(3), r(3).abs() + 0.1, r(3), r(3)), {}),
        "sdpa": ((r(1, 2, 5, 8), r(1, 2, 7, 8), r(1, 2, 7, 8)), {"causal": True}),
        "rope": ((r(2, 3, 5, 8), r(5, 8), r(5, 8)), {}),
        "swiglu": ((r(3, 10),), {}),
    }


def bad_argument(dev):
    """What a bad argument raises on dev: opd.BadArgumentError, or on CUDA
    through libopd's C kernels the RuntimeError torch's dispatcher makes of
    their error (the same message; docs/python.md)."""
    if dev != "cpu" and ot is not None and not ot.c_kernels_why():
        return (opd.BadArgumentError, RuntimeError)
    return opd.BadArgumentError


def devices(c):
    devs = ["cpu"]
    if torch.cuda.is_available() and c.devices():
        devs.append("cuda")
    return devs


@needs_torch24
def test_every_daemon_op_is_registered(tc):
    assert set(ot.ops()) >= set(tc.ops())
    for name in tc.ops():
        assert hasattr(torch.ops.opd, name), name
    assert ot.torch_schema(tc.ops()["scale"]) == \
        "(Tensor x, *, float a=1.0, float b=0.0) -> Tensor"
    assert ot.torch_schema(tc.ops()["conv2d"]) == (
        "(Tensor x, Tensor weight, Tensor? bias=None, *, int[] stride=[1], "
        "int[] padding=[0], int[] dilation=[1], int groups=1, "
        "str padding_mode=\"explicit\") -> Tensor")


@needs_torch24
def test_opcheck_every_op(tc):
    ran = []
    for dev in devices(tc):
        cases = samples(dev)
        for name in tc.ops():
            assert name in cases, "no sample call for op %s: add one" % name
            args, kwargs = cases[name]
            torch.library.opcheck(getattr(torch.ops.opd, name).default, args, kwargs)
            ran.append((dev, name))
    assert len(ran) >= len(tc.ops())


@needs_torch24
def test_results_match_torch(tc, monkeypatch):
    # float32 references (torch's CUDA conv defaults to TF32)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    for dev in devices(tc):
        x = torch.randn(8, 1000, device=dev)
        torch.testing.assert_close(torch.ops.opd.softmax(x), torch.softmax(x, -1))
        torch.testing.assert_close(torch.ops.opd.scale(x, a=3.0, b=1.0), 3 * x + 1)
        torch.testing.assert_close(torch.ops.opd.gelu(x, approximate="tanh"),
                                   F.gelu(x, approximate="tanh"))
        w = torch.randn(16, 8, 3, 3, device=dev) * 0.2
        b = torch.randn(16, device=dev)
        xi = torch.randn(2, 8, 14, 15, device=dev)
        want = F.relu(F.conv2d(xi, w, b, padding=1))
        torch.testing.assert_close(torch.ops.opd.conv3x3_bias_relu(xi, w, b), want,
                                   rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(torch.ops.opd.conv2d(xi, w, b, padding=[1]),
                                   F.conv2d(xi, w, b, padding=1), rtol=1e-4, atol=1e-4)
        # an opd output lives in the daemon's memory on the cpu (an arena):
        # the next op reads it in place; on CUDA it is torch's own memory
        # (torch.empty on the current stream), which runs use in place too
        s = torch.ops.opd.softmax(x)
        if dev == "cpu":
            assert isinstance(ot._in_arena(tc, s), opd.Tensor)
            assert ot._in_arena(tc, x) is x
        else:
            assert ot._in_device_view(tc, s) is s   # not the daemon's memory
        torch.testing.assert_close(torch.ops.opd.scale(s, a=2.0), 2 * torch.softmax(x, -1))
        y = torch.ops.opd.layernorm(x, None, None)
        torch.testing.assert_close(y, F.layer_norm(x, (1000,)), rtol=1e-4, atol=1e-4)
        assert torch.ops.opd.softmax(x).device == x.device


@needs_torch24
def test_torch_compile_fullgraph_traces_the_ops(tc):
    def f(x, w, b):
        return torch.ops.opd.scale(torch.ops.opd.conv3x3_bias_relu(x, w, b), a=0.5) + 1

    g = torch.compile(f, fullgraph=True, backend="aot_eager")
    for dev in devices(tc):
        x = torch.randn(1, 3, 8, 8, device=dev)
        w = torch.randn(4, 3, 3, 3, device=dev)
        b = torch.randn(4, device=dev)
        torch.testing.assert_close(g(x, w, b), f(x, w, b))


@needs_torch24
def test_bad_input_raises_the_daemons_message(tc):
    with pytest.raises(opd.BadArgumentError, match=r"scale: input 0 \(x\) has dtype "
                       "float64, expected float32"):
        torch.ops.opd.scale(torch.zeros(3, dtype=torch.float64))
    with pytest.raises(opd.BadArgumentError, match="conv3x3_bias_relu: weight must be"):
        torch.ops.opd.conv3x3_bias_relu(torch.zeros(1, 2, 4, 4), torch.zeros(3, 5, 3, 3),
                                        torch.zeros(3))


def variants(c, dev):
    """[(torch op name, args, kwargs)] of one valid call of each out= and
    in-place form, on device dev (outputs made by the functional op)."""
    cases = []
    for name, (args, kwargs) in samples(dev).items():
        schema = c.ops().get(name)
        if schema is None or not schema["outputs"]:
            continue
        want = getattr(torch.ops.opd, name)(*args, **kwargs)
        want = want if isinstance(want, tuple) else (want,)
        outs = {n: torch.empty_like(w) for n, w in zip(ot.out_names(schema), want)}
        cases.append((name + "_out", args, dict(kwargs, **outs)))
        if ot.has_inplace(schema) and args[0].shape == want[0].shape:
            cases.append((name + "_", (args[0].clone(),) + tuple(args[1:]), kwargs))
    return cases


@needs_torch24
def test_out_and_inplace_forms_are_registered(tc):
    ops = tc.ops()
    assert ot.out_schema(ops["softmax"]) == \
        "(Tensor x, *, Tensor(a!) out, int dim=-1, str dtype=\"\") -> ()"
    assert ot.out_schema(ops["nms"]) == ("(Tensor boxes, Tensor scores, *, "
                                         "Tensor(a!) out_keep, Tensor(b!) out_count, "
                                         "float iou_threshold) -> ()")
    assert ot.inplace_schema(ops["layernorm"]) == (
        "(Tensor(a!) x, Tensor? weight=None, Tensor? bias=None, *, float eps=1e-05, "
        "int ndims=1) -> ()")
    for name, schema in ops.items():
        assert hasattr(torch.ops.opd, name + "_out") == bool(schema["outputs"]), name
        assert hasattr(torch.ops.opd, name + "_") == ot.has_inplace(schema), name
    assert ot.has_inplace(ops["relu"]) and not ot.has_inplace(ops["matmul"])


@needs_torch24
def test_opcheck_out_and_inplace_forms(tc):
    ran = set()
    for dev in devices(tc):
        for name, args, kwargs in variants(tc, dev):
            torch.library.opcheck(getattr(torch.ops.opd, name).default, args, kwargs)
            ran.add(name)
    assert {"softmax_out", "softmax_", "add_", "scale_", "nms_out",
            "conv3x3_bias_relu_out"} <= ran


@needs_torch24
def test_out_and_inplace_results(tc):
    for dev in devices(tc):
        x = torch.randn(8, 1000, device=dev)
        want = torch.softmax(x, -1)
        y = torch.empty(8, 1000, device=dev)          # torch's memory
        assert torch.ops.opd.softmax_out(x, out=y) is None
        torch.testing.assert_close(y, want)
        y = torch.ops.opd.softmax(x)                    # opd's memory: in place
        torch.ops.opd.relu_out(x, out=y)
        torch.testing.assert_close(y, torch.relu(x))
        yt = torch.empty(1000, 8, device=dev).t()       # not contiguous: copied
        torch.ops.opd.softmax_out(x, out=yt)
        torch.testing.assert_close(yt, want)
        z = x.clone()
        assert torch.ops.opd.softmax_(z) is None
        torch.testing.assert_close(z, want)
        z = torch.ops.opd.scale(x, a=1.0)               # in place in opd's memory
        torch.ops.opd.scale_(z, a=2.0, b=1.0)
        torch.testing.assert_close(z, 2 * x + 1)
        a, b = torch.randn(3, 4, device=dev), torch.randn(4, device=dev)
        a0 = a.clone()
        torch.ops.opd.add_(a, b)
        torch.testing.assert_close(a, a0 + b)
        with pytest.raises(bad_argument(dev), match=r"softmax_out: output 0 has dtype "
                           r"float32 and shape \(3,\); the op's output here is "
                           r"float32 \(8, 1000\)"):
            torch.ops.opd.softmax_out(x, out=torch.empty(3, device=dev))
        with pytest.raises(bad_argument(dev), match=r"add_: output 0 has dtype "
                           r"float32 and shape \(4,\); the op's output here is "
                           r"float32 \(3, 4\)"):
            torch.ops.opd.add_(b, a)                    # broadcast: not in place
        with pytest.raises(bad_argument(dev), match="has dtype int32"):
            torch.ops.opd.relu_(torch.zeros(3, dtype=torch.int32, device=dev))


@needs_torch24
def test_plans_reuse_staging_and_shape_rule(tc):
    # a CPU input outside shared memory is copied into the plan's staging
    # tensor: repeated calls add no arena and ask no INFER; each call's
    # output is its own tensor (staging is reused, outputs are not)
    run = ot._runners["softmax"]
    x = torch.randn(256, 512)
    first = torch.ops.opd.softmax(x)
    arenas = tc.memory_stats()["arenas"]
    plans = len(run.plans)
    outs = [torch.ops.opd.softmax(x * k) for k in range(1, 6)]
    for k, y in enumerate(outs, 1):
        torch.testing.assert_close(y, torch.softmax(x * k, -1))
    torch.testing.assert_close(first, torch.softmax(x, -1))
    assert len(run.plans) == plans
    assert tc.memory_stats()["arenas"] <= arenas + 1
    p = next(reversed(run.plans.values()))
    assert p.stage[0] is not None and p.staged == 256 * 512 * 4


@needs_torch24
def test_torch_compile_traces_out_and_inplace_forms(tc):
    def f(x):
        y = torch.empty_like(x)
        torch.ops.opd.softmax_out(x, out=y)
        z = y * 2
        torch.ops.opd.relu_(z)
        return z + 1

    g = torch.compile(f, fullgraph=True, backend="aot_eager")
    for dev in devices(tc):
        x = torch.randn(4, 33, device=dev)
        torch.testing.assert_close(g(x), f(x))
