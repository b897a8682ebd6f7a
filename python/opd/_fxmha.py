"""opd._fxmha: nn.MultiheadAttention's fused forward
(F.multi_head_attention_forward, which dynamo keeps as one call) written
out in the ops opd lowers, before the graph is partitioned (a rewrite of
opd._fxnorm.normalize, part of the torch.compile backend).

DESIGN
The call becomes, for query (L, N, E), key and value (S, N, E) (an
unbatched (L, E) is taken as N = 1 and given back as (L, E)):
    q, k, v = linear(query, W_q, b_q), ...   one linear of the packed
              (3E, E) in_proj_weight when query, key and value are one
              node (self-attention, ViT), then three narrows; else
              narrows of the weight, one linear each
    q (L, N, E) -> reshape (L, N, H, D) -> permute (N, H, L, D)
    o = sdpa(q, k, v, mask)                 (N, H, L, D)
    o -> permute (L, N, H, D) -> reshape (L, N, E) -> linear(W_o, b_o)
with the mask as torch's MHA reads it (a bool attn_mask is True where a
key may NOT be attended: its logical_not goes to sdpa; a float one is
added; (L, S) or (N*H, L, S), the latter reshaped to (N, H, L, S); a
key_padding_mask (N, S) is added as (N, 1, 1, S), a bool one as -inf
where True), and is_causal as sdpa's. When the attention weights are read
(need_weights=True and the tuple's element 1 has users), the attention
is written out instead of sdpa: softmax(q kᵀ / sqrt(D) + mask) (N, H, L,
S), the weights averaged over heads (average_attn_weights) or not, times
v. Calls with what this does not write out (bias_k / bias_v,
add_zero_attn, static_k / static_v, dropout in training) stay as they
are, and so in torch.

Each new node gets its meta value (node.meta["val"] and
["example_value"]) by running its target on the fake values of its
inputs under their fake mode (real tensors, such as folded constants,
converted into it), in the grad mode the backend runs in; a graph with
no fake mode is left alone.
"""
import math
import operator

import torch
import torch.nn.functional as F

from ._fxbase import arg, meta

MHA_ARGS = ("query", "key", "value", "embed_dim_to_check", "num_heads", "in_proj_weight",
            "in_proj_bias", "bias_k", "bias_v", "add_zero_attn", "dropout_p",
            "out_proj_weight", "out_proj_bias", "training", "key_padding_mask",
            "need_weights", "attn_mask", "use_separate_proj_weight", "q_proj_weight",
            "k_proj_weight", "v_proj_weight", "static_k", "static_v",
            "average_attn_weights", "is_causal")
MHA_DEFAULTS = {"training": True, "key_padding_mask": None, "need_weights": True,
                "attn_mask": None, "use_separate_proj_weight": False,
                "q_proj_weight": None, "k_proj_weight": None, "v_proj_weight": None,
                "static_k": None, "static_v": None, "average_attn_weights": True,
                "is_causal": False}


def _fake_mode(gm):
    for n in gm.graph.nodes:
        v = meta(n)
        mode = getattr(v, "fake_mode", None)
        if mode is not None:
            return mode
    return None


class _Builder:
    """Adds call_function nodes before `at`, each with its meta value."""

    def __init__(self, gm, at, mode):
        self.g, self.at, self.mode = gm.graph, at, mode

    def _fake(self, x):
        if isinstance(x, torch.fx.Node):
            v = meta(x)
            if v is None:
                raise ValueError("no meta value")
            return v if getattr(v, "fake_mode", None) is self.mode else self.mode.from_tensor(v)
        if isinstance(x, (list, tuple)):
            return type(x)(self._fake(y) for y in x)
        return x

    def __call__(self, fn, *args, **kwargs):
        with self.mode:
            v = fn(*self._fake(args), **{k: self._fake(a) for k, a in kwargs.items()})
        with self.g.inserting_before(self.at):
            n = self.g.call_function(fn, args, kwargs)
        n.meta["val"] = n.meta["example_value"] = v
        return n


def _args(n):
    """F.multi_head_attention_forward's arguments by name."""
    a = dict(MHA_DEFAULTS)
    for i, name in enumerate(MHA_ARGS):
        v = arg(n, i, name, a.get(name))
        a[name] = v
    return a


def _plain(a):
    """True when the call is one this rewrite writes out."""
    return (a["bias_k"] is None and a["bias_v"] is None and not a["add_zero_attn"]
            and a["static_k"] is None
            and a["static_v"] is None and isinstance(a["num_heads"], int)
            and (not a["training"] or a["dropout_p"] in (0, 0.0)))


def _heads(b, x, N, H, D):
    """x (T, N, E) -> (N, H, T, D)."""
    T = int(meta(x).shape[0])
    return b(torch.permute, b(torch.reshape, x, (T, N, H, D)), (1, 2, 0, 3))


def _projections(b, a, E):
    q, k, v = a["query"], a["key"], a["value"]
    if a["use_separate_proj_weight"]:
        ws = [a["q_proj_weight"], a["k_proj_weight"], a["v_proj_weight"]]
    else:
        w = a["in_proj_weight"]
        if q is k and k is v:             # self-attention: one linear
            qkv = b(F.linear, q, w, a["in_proj_bias"])
            return [b(torch.narrow, qkv, -1, i * E, E) for i in range(3)]
        ws = [b(torch.narrow, w, 0, i * E, E) for i in range(3)]
    bias = a["in_proj_bias"]
    bs = [None] * 3 if bias is None else [b(torch.narrow, bias, 0, i * E, E) for i in range(3)]
    return [b(F.linear, x, w_, b_) for x, w_, b_ in zip((q, k, v), ws, bs)]


def _mask(b, a, N, H, L, S):
    """The mask sdpa takes (bool: True attends; float: added), or None:
    attn_mask ((L, S) or (N*H, L, S)) and key_padding_mask ((N, S), as
    (N, 1, 1, S)) as torch's MHA reads them (bool: True is NOT attended),
    added together when both are given."""
    m, kpm = a["attn_mask"], a["key_padding_mask"]
    if m is not None and meta(m).dim() == 3:
        m = b(torch.reshape, m, (N, H, L, S))
    if kpm is None:
        return b(torch.logical_not, m) if m is not None and meta(m).dtype == torch.bool else m
    if m is not None and meta(m).dtype == torch.bool:
        m = b(torch.where, m, -math.inf, 0.0)
    k = b(torch.where, kpm, -math.inf, 0.0) if meta(kpm).dtype == torch.bool else kpm
    k = b(torch.reshape, k, (N, 1, 1, S))
    return k if m is None else b(operator.add, m, k)


def _rewrite(gm, n, mode):
    a = _args(n)
    if not _plain(a):
        return False
    qm = meta(a["query"])
    if qm is None or qm.dim() not in (2, 3) or meta(a["key"]) is None:
        return False
    users = list(n.users)
    if not all(u.op == "call_function" and u.target is operator.getitem and
               u.args[1] in (0, 1) for u in users):
        return False
    weights = [u for u in users if u.args[1] == 1 and u.users]
    if weights and not a["need_weights"]:
        return False
    b = _Builder(gm, n, mode)
    unbatched = qm.dim() == 2
    E, H = int(qm.shape[-1]), a["num_heads"]
    D = E // H
    if unbatched:                          # (T, E) -> (T, 1, E), each node once
        made = {}
        for name in ("query", "key", "value"):
            x = a[name]
            if x not in made:
                made[x] = b(torch.reshape, x, (int(meta(x).shape[0]), 1, E))
            a[name] = made[x]
    L, N = int(meta(a["query"]).shape[0]), int(meta(a["query"]).shape[1])
    S = int(meta(a["key"]).shape[0])
    q, k, v = [_heads(b, x, N, H, D) for x in _projections(b, a, E)]
    mask = _mask(b, a, N, H, L, S)
    causal = bool(a["is_causal"]) and mask is None
    w = None
    if weights:                            # written out: the weights are read
        s = b(torch.matmul, b(operator.mul, q, 1.0 / math.sqrt(D)),
              b(torch.transpose, k, -2, -1))                   # (N, H, L, S)
        if mask is not None and meta(mask).dtype == torch.bool:
            mask = b(torch.where, mask, 0.0, -math.inf)
        if causal:                         # key j > query i masked, as sdpa's
            mask = b(torch.where, b(torch.tril, b(torch.ones, (L, S), dtype=torch.bool)),
                     0.0, -math.inf)
        if mask is not None:
            s = b(operator.add, s, mask)
        p = b(torch.softmax, s, -1)
        o = b(torch.matmul, p, v)
        w = b(torch.mean, p, 1) if a["average_attn_weights"] else p
        if unbatched:
            w = b(torch.reshape, w, tuple(meta(w).shape[1:]))
    else:
        o = b(F.scaled_dot_product_attention, q, k, v, attn_mask=mask, is_causal=causal)
    o = b(torch.reshape, b(torch.permute, o, (2, 0, 1, 3)), (L, N, E))
    o = b(F.linear, o, a["out_proj_weight"], a["out_proj_bias"])
    if unbatched:
        o = b(torch.reshape, o, (L, E))
    for u in users:
        if u.args[1] == 0:
            u.replace_all_uses_with(o)
        elif w is not None:
            u.replace_all_uses_with(w)
        gm.graph.erase_node(u)
    gm.graph.erase_node(n)
    return True


def mha(gm):
    """Writes out each F.multi_head_attention_forward call it can; returns
    how many."""
    calls = [n for n in gm.graph.nodes
             if n.op == "call_function" and n.target is F.multi_head_attention_forward]
    mode = _fake_mode(gm) if calls else None
    if mode is None:
        return 0
    done = 0
    for n in calls:
        try:
            done += _rewrite(gm, n, mode)
        except (ValueError, RuntimeError, TypeError):   # noqa: PERF203 (torch keeps it)
            continue                # the nodes added so far are dead: removed below
    gm.graph.eliminate_dead_code()
    return done
