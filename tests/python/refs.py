"""numpy references for every operator (PyTorch semantics), computed in
float64: what the daemon's float32 results are checked against."""
import math

import numpy as np

_erf = np.vectorize(math.erf)


def gelu(x, approximate="none"):
    x = x.astype(np.float64)
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def softmax(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layernorm(x, w=None, b=None, eps=1e-5):
    x = x.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def rmsnorm(x, w=None, eps=float(np.finfo(np.float32).eps)):
    x = x.astype(np.float64)
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y * w if w is not None else y


def conv2d(x, w, b=None, stride=1, padding=0, dilation=1):
    """F.conv2d by one einsum per kernel tap."""
    two = lambda v: (v, v) if isinstance(v, int) else tuple(v)  # noqa: E731
    (sh, sw), (ph, pw), (dh, dw) = two(stride), two(padding), two(dilation)
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    p = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
    q = (wd + 2 * pw - dw * (s - 1) - 1) // sw + 1
    xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    out = np.zeros((n, k, p, q))
    for i in range(r):
        for j in range(s):
            patch = xp[:, :, i * dh: i * dh + sh * (p - 1) + 1: sh,
                       j * dw: j * dw + sw * (q - 1) + 1: sw]
            out += np.einsum("nchw,kc->nkhw", patch, w[:, :, i, j])
    if b is not None:
        out += b[None, :, None, None]
    return out


def nms(boxes, scores, iou_threshold):
    """torchvision.ops.nms in pure Python: kept indices by descending score."""
    boxes = boxes.astype(np.float64)
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    keep, dead = [], set()
    for a, i in enumerate(order):
        if i in dead:
            continue
        keep.append(i)
        for j in order[a + 1:]:
            if j in dead:
                continue
            iw = min(boxes[i, 2], boxes[j, 2]) - max(boxes[i, 0], boxes[j, 0])
            ih = min(boxes[i, 3], boxes[j, 3]) - max(boxes[i, 1], boxes[j, 1])
            inter = max(iw, 0) * max(ih, 0)
            union = area[i] + area[j] - inter
            if union > 0 and inter / union > iou_threshold:
                dead.add(j)
    return np.array(keep, dtype=np.int64)
