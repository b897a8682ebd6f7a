"""opd._fxnorm: a dynamo FX graph rewritten into the forms opd's lowering
takes, before it is partitioned (part of the torch.compile backend,
opd.dynamo).

DESIGN
Each rewrite keeps the graph's meaning in torch (a node that stays in
torch after partitioning computes what it did before), so normalize() can
run on every graph whatever the daemon has:
- fold() (after inplace()): nodes computed from no runtime tensor (torch.arange, an empty
  torch.tensor([]), x.new_ones(shape), and whatever is computed from
  those alone: arange + 0, .unsqueeze(0), a causal mask's comparisons)
  are evaluated once, now, and become module constants (get_attr), so
  opd receives them as graph constants (GPT-2's position ids). A
  parameter or an input's values never fold (a parameter may be updated
  in place, which a folded copy would miss); random and in-place calls
  never fold. A tensor written in place folds with its writes only when
  each is a setitem of constants and torch reads it after the last one
  (Swin's attention mask: x.new_zeros() then filled slice by slice).
- split_getitem(): getitem(split(x, size, dim), i) and chunk's become
  torch.narrow(x, dim, start, length), one node per piece (opd's slice).
- cat_empty(): torch.cat drops inputs with no elements (the empty KV cache
  of transformers' attention, torch.tensor([])); a cat left with one
  input is that input.
- gelu_tanh(): the tanh approximation of GELU written out
  (0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))), GPT-2's
  NewGELUActivation) becomes F.gelu(x, approximate="tanh"), which a linear
  before it can fuse as its epilogue.
- inplace(): an in-place call (F.relu(x, inplace=True), nn.ReLU(inplace=True)
  as dynamo inlines it, `out += identity` as operator.iadd, x.add_(y),
  torch.relu_) becomes its out-of-place form when nothing else can see
  the tensor it writes: x is computed in this graph by a call that makes
  a new tensor (not an input, a parameter, a view, an alias or another
  in-place call) and no view of x is taken, so the only way to read the
  written x is through x itself; every user of x after the call then
  reads the call's result instead. Otherwise the call stays in place and in torch
  (its rule refuses it, naming it).
- mha() (opd._fxmha, first): nn.MultiheadAttention's fused
  F.multi_head_attention_forward written out as linears, views and
  scaled_dot_product_attention.
The graph is linted and recompiled after the rewrites.
"""
import math
import operator

import torch
import torch.nn.functional as F

from . import _fxmha

FACTORIES = {torch.arange, torch.tensor, torch.zeros, torch.ones, torch.full,
             torch.eye, torch.linspace}
# methods whose result depends on their tensor's dtype and device only
NEW_METHODS = {"new_ones", "new_zeros", "new_full", "new_tensor"}
# never folded: random, or results that are not a function of the inputs
IMPURE = {torch.rand, torch.randn, torch.randint, torch.rand_like,
          torch.randn_like, torch.bernoulli, torch.normal, torch.multinomial,
          torch.randperm}
FOLD_BYTES = 16 << 20           # larger results stay computed by torch


def _val(n):
    m = getattr(n, "meta", None) or {}
    v = m.get("example_value", m.get("val"))
    return v if isinstance(v, torch.Tensor) else None


def _map(x, env):
    if isinstance(x, torch.fx.Node):
        return env[x]
    if isinstance(x, (list, tuple)):
        return type(x)(_map(y, env) for y in x)
    if isinstance(x, dict):
        return {k: _map(v, env) for k, v in x.items()}
    return x


def _nodes_in(args):
    out = []
    torch.fx.node.map_arg(args, out.append)
    return out


def fold(gm):
    """Evaluates the nodes computed from no runtime tensor; returns how many
    became constants. A tensor written in place (directly or through a
    view) folds with its writes only when each write is a setitem of
    constant indices and values (Swin's attention mask: x.new_zeros()
    then filled slice by slice) and every reader that stays comes after
    the last write: the setitems are evaluated in order, with the rest,
    and removed, so nothing writes a folded buffer at run time. Any other
    write (an in-place call, a setitem of runtime values) keeps the
    written tensor, and what is computed from it, torch's: folding would
    evaluate its readers before the writes (and a folded buffer would
    carry the writes into the next call)."""
    groups = _write_groups(gm)
    bad = set()
    while True:
        env, wrote, worse = _evaluate(gm, groups, bad)
        if not worse:
            break
        bad |= worse
    made = 0
    for n in wrote:
        gm.graph.erase_node(n)
    for n, v in env.items():
        if not n.users or all(u in env for u in n.users):
            continue                    # only what a kept node reads
        name = "_opd_folded_%d" % made
        made += 1
        gm.register_buffer(name, v.detach().clone().contiguous(), persistent=False)
        with gm.graph.inserting_before(n):
            c = gm.graph.get_attr(name)
        c.meta = dict(n.meta)
        c.meta["example_value"] = getattr(gm, name)
        n.replace_all_uses_with(c)
    if made or wrote:
        gm.graph.eliminate_dead_code()
    return made


def _evaluate(gm, groups, bad):
    """One folding pass: (env: node -> its value, the setitems done, the
    groups (roots) that cannot fold after all), leaving out the groups
    in bad."""
    env, wrote, worse = {}, [], set()
    skip = {m for r in bad for m in groups[r][0]}
    member = {m: r for r, (ms, _) in groups.items() for m in ms}
    writer = {w: r for r, (_, ws) in groups.items() for w in ws}
    for n in list(gm.graph.nodes):
        if n.op not in ("call_function", "call_method") or n in skip:
            continue
        deps = _nodes_in((n.args, n.kwargs))
        if n in writer:
            r = writer[n]
            if not (n.op == "call_function" and n.target is operator.setitem) or \
                    any(d not in env for d in deps):
                worse.add(r)
                continue
            try:
                with torch.no_grad():
                    operator.setitem(*_map(n.args, env))
            except Exception:           # noqa: BLE001 (torch says why at run)
                worse.add(r)
                continue
            wrote.append(n)
            continue
        newm = n.op == "call_method" and n.target in NEW_METHODS
        if newm:
            like = _val(n.args[0])
            if like is None or any(d not in env for d in deps[1:]):
                continue
            env_n = dict(env)
            env_n[n.args[0]] = torch.empty(0, dtype=like.dtype, device=like.device)
        elif any(d not in env for d in deps):
            continue
        elif not deps and n.target not in FACTORIES:
            continue
        elif n.target in IMPURE or n.is_impure() or (
                n.op == "call_method" and n.target.endswith("_")) or \
                n.kwargs.get("out") is not None:
            continue
        else:
            env_n = env
        args, kwargs = _map(n.args, env_n), _map(n.kwargs, env_n)
        try:
            with torch.no_grad():
                if n.op == "call_method":
                    v = getattr(args[0], n.target)(*args[1:], **kwargs)
                else:
                    v = n.target(*args, **kwargs)
        except Exception:               # noqa: BLE001 (torch says why at run)
            continue
        if not isinstance(v, torch.Tensor) or v.numel() * v.element_size() > FOLD_BYTES:
            continue
        env[n] = v
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    done = set(wrote)
    for r, (ms, writers) in groups.items():
        if r in bad or r in worse or not writers:
            continue
        last = max(order[w] for w in writers)
        if any(m not in env and m not in done for m in ms
               if m.op in ("call_function", "call_method")) or any(
                u not in env and u not in done and order[u] < last
                for m in ms for u in m.users):
            worse.add(r)                # a reader torch runs before a write
    return env, [w for w in wrote if writer[w] not in worse], worse


def _split_pieces(n):
    """The (start, length) of each piece of a split/chunk node n along its
    dim, and the dim; None if n is not one."""
    x = n.args[0] if n.args else None
    xm = _val(x)
    if xm is None:
        return None
    name = n.target if n.op == "call_method" else getattr(n.target, "__name__", "")
    if name not in ("split", "chunk", "tensor_split") or name == "tensor_split":
        return None
    dim = n.kwargs.get("dim", n.args[2] if len(n.args) > 2 else 0)
    if not isinstance(dim, int):
        return None
    dim %= xm.dim()
    size = xm.shape[dim]
    second = n.args[1] if len(n.args) > 1 else n.kwargs.get(
        "split_size_or_sections", n.kwargs.get("split_size", n.kwargs.get("chunks")))
    if name == "chunk":
        if not isinstance(second, int) or second <= 0:
            return None
        step = -(-size // second)
        lens = [min(step, size - s) for s in range(0, size, step)]
    elif isinstance(second, int):
        if second <= 0:
            return None
        lens = [min(second, size - s) for s in range(0, size, second)]
    elif isinstance(second, (list, tuple)) and all(isinstance(k, int) for k in second):
        lens = list(second)
    else:
        return None
    starts = [sum(lens[:i]) for i in range(len(lens))]
    return dim, list(zip(starts, lens))


def split_getitem(gm):
    """getitem(split(x, ...), i) -> torch.narrow(x, dim, start, length);
    returns how many pieces were rewritten."""
    done = 0
    for n in list(gm.graph.nodes):
        if n.op not in ("call_function", "call_method"):
            continue
        plan = _split_pieces(n)
        if plan is None:
            continue
        dim, pieces = plan
        users = list(n.users)
        if not all(u.op == "call_function" and u.target is operator.getitem and
                   isinstance(u.args[1], int) for u in users):
            continue
        for u in users:
            start, length = pieces[u.args[1]]
            with gm.graph.inserting_before(u):
                r = gm.graph.call_function(torch.narrow,
                                           (n.args[0], dim, start, length))
            r.meta = dict(u.meta)
            u.replace_all_uses_with(r)
            gm.graph.erase_node(u)
            done += 1
        gm.graph.erase_node(n)
    return done


def cat_empty(gm):
    """torch.cat without its inputs of no elements; returns how many cats
    changed."""
    done = 0
    for n in list(gm.graph.nodes):
        if not (n.op == "call_function" and n.target in (torch.cat, torch.concat)):
            continue
        xs = n.args[0] if n.args else n.kwargs.get("tensors")
        if not isinstance(xs, (list, tuple)):
            continue
        metas = [_val(x) for x in xs]
        if any(m is None for m in metas):
            continue
        keep = [x for x, m in zip(xs, metas) if m.numel() > 0]
        if len(keep) == len(xs) or not keep:
            continue
        if len(keep) == 1 and _val(keep[0]).shape == _val(n).shape and \
                _val(keep[0]).dtype == _val(n).dtype:
            n.replace_all_uses_with(keep[0])
            gm.graph.erase_node(n)
        else:
            n.args = (list(keep),) + tuple(n.args[1:])
        done += 1
    if done:
        gm.graph.eliminate_dead_code()
    return done


def _num(x, want, tol=1e-6):
    return isinstance(x, (int, float)) and abs(float(x) - want) <= tol * max(1.0, abs(want))


def _is(n, *targets):
    return isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target in targets


def _scaled(n, c):
    """x if n is c * x or x * c (c a number), else None."""
    if not _is(n, operator.mul, torch.mul):
        return None
    a, b = n.args[0], n.args[1]
    if _num(a, c) and isinstance(b, torch.fx.Node):
        return b
    if _num(b, c) and isinstance(a, torch.fx.Node):
        return a
    return None


def _plus(n, pred):
    """(the node operand, the other) of an addition n whose other operand
    satisfies pred, else (None, None)."""
    if not _is(n, operator.add, torch.add) or len(n.args) < 2 or n.kwargs.get("alpha", 1) != 1:
        return None, None
    a, b = n.args[0], n.args[1]
    if pred(a):
        return b, a
    if pred(b):
        return a, b
    return None, None


def _cube_of(n):
    if _is(n, torch.pow, operator.pow) and _num(n.args[1], 3.0):
        return n.args[0]
    return None


def _gelu_tanh_input(n):
    """x when n computes 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x**3))),
    else None."""
    if not _is(n, operator.mul, torch.mul) or len(n.args) < 2:
        return None
    for half, rest in ((n.args[0], n.args[1]), (n.args[1], n.args[0])):
        x = _scaled(half, 0.5)
        if x is None:
            continue
        th, _ = _plus(rest, lambda v: _num(v, 1.0))
        if not _is(th, torch.tanh):
            continue
        inner = _scaled(th.args[0], math.sqrt(2.0 / math.pi))
        x2, cube = _plus(inner, lambda v: _scaled(v, 0.044715) is not None) \
            if inner is not None else (None, None)
        if x2 is not x or _cube_of(_scaled(cube, 0.044715)) is not x:
            continue
        return x
    return None


def gelu_tanh(gm):
    """The written-out tanh GELU as F.gelu(x, approximate="tanh"); returns
    how many were found."""
    done = 0
    for n in list(gm.graph.nodes):
        x = _gelu_tanh_input(n)
        if x is None:
            continue
        with gm.graph.inserting_before(n):
            g = gm.graph.call_function(F.gelu, (x,), {"approximate": "tanh"})
        g.meta = dict(n.meta)
        n.replace_all_uses_with(g)
        gm.graph.erase_node(n)
        done += 1
    if done:
        gm.graph.eliminate_dead_code()
    return done


# in-place calls and their out-of-place forms
INPLACE_OPS = {operator.iadd: operator.add, operator.isub: operator.sub,
               operator.imul: operator.mul, operator.itruediv: operator.truediv,
               torch.relu_: torch.relu, torch.sigmoid_: torch.sigmoid,
               torch.tanh_: torch.tanh}
# functions with an `inplace` argument: its position
INPLACE_ARG = {F.relu: 1, F.relu6: 1, F.silu: 1, F.hardswish: 1,
               F.hardsigmoid: 1, F.mish: 1, F.selu: 1, F.hardtanh: 3,
               F.leaky_relu: 2, F.elu: 2, F.celu: 2, F.threshold: 3}
# calls whose result may share its input's memory (views, identities)
ALIAS_FUNCS = {torch.reshape, torch.flatten, torch.unsqueeze, torch.squeeze,
               torch.transpose, torch.permute, torch.t, torch.swapaxes,
               torch.narrow, torch.select, torch.split, torch.chunk,
               torch.unbind, torch.as_strided, torch.diagonal, torch.detach,
               operator.getitem, F.dropout, F.dropout1d, F.dropout2d,
               F.dropout3d, F.alpha_dropout, F.feature_alpha_dropout}
ALIAS_METHODS = {"view", "view_as", "reshape", "reshape_as", "flatten",
                 "unflatten", "unsqueeze", "squeeze", "transpose", "permute",
                 "t", "swapaxes", "swapdims", "narrow", "select", "split",
                 "chunk", "unbind", "expand", "expand_as", "as_strided",
                 "diagonal", "contiguous", "detach", "to", "type", "type_as",
                 "float", "double", "half", "bfloat16", "__getitem__"}
ALIAS_MODULES = (torch.nn.Dropout, torch.nn.Dropout1d, torch.nn.Dropout2d,
                 torch.nn.Dropout3d, torch.nn.AlphaDropout, torch.nn.Identity,
                 torch.nn.Flatten, torch.nn.Unflatten)


def _inplace_form(n):
    """(how to make n out of place) if n is an in-place call, else None."""
    if n.op == "call_function":
        if n.target in INPLACE_OPS:
            return ("target", INPLACE_OPS[n.target])
        pos = INPLACE_ARG.get(n.target)
        if pos is not None:
            v = n.args[pos] if len(n.args) > pos else n.kwargs.get("inplace", False)
            if v is True:
                return ("arg", pos)
    elif n.op == "call_method" and isinstance(n.target, str):
        name = n.target
        if name.endswith("_") and not name.endswith("__") and \
                hasattr(torch.Tensor, name[:-1]):
            return ("target", name[:-1])
    return None


def _fresh(gm, x):
    """True if node x makes a tensor of its own that nothing outside the
    graph's nodes can reach."""
    if not isinstance(x, torch.fx.Node) or _val(x) is None:
        return False
    if x.op == "call_module":
        return not isinstance(gm.get_submodule(x.target), ALIAS_MODULES)
    if x.op == "call_function":
        return x.target not in ALIAS_FUNCS and _inplace_form(x) is None
    if x.op == "call_method":
        return x.target not in ALIAS_METHODS and _inplace_form(x) is None
    return False                  # placeholders, parameters, outputs


def _writes(n):
    """True if n writes its first argument in place (setitem, an in-place
    call, an out= tensor)."""
    return (n.op == "call_function" and n.target is operator.setitem) or \
        _inplace_form(n) is not None or \
        (n.op in ("call_function", "call_method") and n.kwargs.get("out") is not None)


def _aliases(gm, n):
    """True if n's result may share memory with its first argument."""
    if n.op == "call_module":
        return isinstance(gm.get_submodule(n.target), ALIAS_MODULES)
    if n.op == "call_function":
        return n.target in ALIAS_FUNCS or _writes(n)
    if n.op == "call_method":
        return n.target in ALIAS_METHODS or _writes(n)
    return False


def _write_groups(gm):
    """The tensors written in place, by memory: {root node: (the nodes
    sharing its memory (union of alias edges), the nodes writing it)}."""
    up = {}

    def root(a):
        while up.get(a, a) is not a:
            a = up[a]
        return a
    hits = []
    for n in gm.graph.nodes:
        x = n.args[0] if n.args and isinstance(n.args[0], torch.fx.Node) else None
        if x is None:
            continue
        if _aliases(gm, n):
            up[root(n)] = root(x)
        if _writes(n):
            hits.append(n)
    groups = {}
    for w in hits:
        groups.setdefault(root(w.args[0]), (set(), []))[1].append(w)
    for n in gm.graph.nodes:
        r = root(n)
        if r in groups:
            groups[r][0].add(n)
    return groups


def inplace(gm):
    done = 0
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    for n in list(gm.graph.nodes):
        form = _inplace_form(n)
        if form is None or not n.args or not _fresh(gm, n.args[0]):
            continue
        x = n.args[0]
        if any(u is not n and _aliases(gm, u) and u.args and u.args[0] is x
               for u in x.users):
            continue                  # a view of x would see the write
        if form[0] == "target":
            n.target = form[1]
        else:
            pos = form[1]
            if len(n.args) > pos:
                n.args = n.args[:pos] + (False,) + n.args[pos + 1:]
            else:
                n.kwargs = dict(n.kwargs, inplace=False)
        for u in list(x.users):
            if u is not n and order[u] > order[n]:
                u.replace_input_with(x, n)
        done += 1
    return done


def normalize(gm):
    """All the rewrites, in order; returns {rewrite: count}."""
    counts = {"mha": _fxmha.mha(gm), "inplace": inplace(gm), "fold": fold(gm), "split": split_getitem(gm),
              "cat": cat_empty(gm), "gelu_tanh": gelu_tanh(gm)}
    gm.graph.lint()
    gm.recompile()
    return counts
