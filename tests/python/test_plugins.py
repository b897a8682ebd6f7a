"""Operator plugins from Python: the example plugins' ops (examples/plugins)
called through the Client like built-ins, against numpy; the plugin list and
each op's origin."""
import os

import numpy as np
import pytest

import opd
from conftest import PLUGINS_DIR


@pytest.fixture
def pc(plugin_daemon):
    c = opd.connect(plugin_daemon.socket)
    yield c
    c.close()


def test_plugins_lists_versions_ops_and_origins(pc):
    info = pc.plugins()
    names = {p["name"]: p for p in info["plugins"]}
    assert set(names) == {"hello", "conv3x3_bias_relu"}
    hello = names["hello"]
    assert hello["version"] == "1.0" and hello["abi"] == 1
    assert hello["ops"] == ["scale"]
    assert hello["path"] == os.path.realpath(os.path.join(PLUGINS_DIR, "hello.so"))
    ops = pc.ops()
    assert ops["scale"]["origin"] == hello["path"]
    assert ops["softmax"]["origin"] == "built-in"
    assert info["origins"]["conv3x3_bias_relu"] == names["conv3x3_bias_relu"]["path"]


def test_scale_as_a_method_and_through_run(pc, rng):
    x = rng.standard_normal((7, 33)).astype(np.float32)
    y = pc.scale(x, a=3.0, b=0.5)
    np.testing.assert_allclose(y.numpy(), 3 * x + 0.5, rtol=1e-6, atol=1e-6)
    t = pc.from_numpy(x)
    pc.run("scale", t, out=t, a=2)          # in place; an int for a float attr
    np.testing.assert_allclose(t.numpy(), 2 * x, rtol=1e-6)
    assert pc.infer("scale", t) == [("float32", (7, 33))]
    with pytest.raises(opd.BadArgumentError, match=r"scale: input 0 \(x\) has dtype "
                       "float64, expected float32"):
        pc.scale(x.astype(np.float64))


def conv_bias_relu(x, w, b):
    N, C, H, W = x.shape
    K = w.shape[0]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((N, K, H, W)) + b.reshape(1, K, 1, 1)
    for r in range(3):
        for s in range(3):
            y += np.einsum("nchw,kc->nkhw", xp[:, :, r:r + H, s:s + W], w[:, :, r, s])
    return np.maximum(y, 0).astype(np.float32)


# the last two take cpu_fast's BLAS path (C, K >= 32): tiles of rows, of images
@pytest.mark.parametrize("N,C,H,W,K", [(2, 5, 12, 19, 7), (1, 32, 37, 29, 33),
                                       (3, 32, 6, 7, 33)])
def test_conv3x3_bias_relu_matches_numpy_and_conv2d_relu(pc, rng, N, C, H, W, K):
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = (rng.standard_normal((K, C, 3, 3)) * 0.3).astype(np.float32)
    b = rng.standard_normal(K).astype(np.float32)
    y = pc.conv3x3_bias_relu(x, w, b).numpy()
    ref = conv_bias_relu(x, w, b)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    z = pc.relu(pc.conv2d(x, w, b, padding=1)).numpy()
    np.testing.assert_allclose(y, z, rtol=1e-4, atol=1e-4)
