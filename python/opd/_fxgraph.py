"""opd._fxgraph: a dynamo FX graph's supported subgraphs as opd graphs (the
body of the torch.compile backend, opd.dynamo).

DESIGN
compile_fx() rewrites the graph into the forms the lowering takes
(_fxnorm: constants folded, split pieces as narrow, empty cat inputs
dropped, the written-out tanh GELU as one gelu), marks the graph's constants (placeholders dynamo feeds
parameters and buffers, get_attr tensors: meta "opd_const"), asks
torch.fx's CapabilityBasedPartitioner for the largest subgraphs of nodes
_fxlower.spec() accepts (Support: each refused node is logged once per
compile on the "opd.compile" logger, with its reason), fuses each into a
submodule (fuse_partitions) and replaces that submodule with a Part: one
opd Graph defined at compile time from the submodule's nodes. A partition
over a graph's limits (CHUNK_NODES nodes or CHUNK_CONSTS constants, half
the daemon's: one FX node may make several opd nodes) is cut first into
runs of consecutive nodes in the graph's order, each under both (a run
of consecutive nodes of a convex partition is convex: a path between two
of its nodes through any other node would pass a node between them in
topological order), so ResNet-50's 444 nodes and 320 constants become
two graphs, not a model left to torch. A subgraph the daemon still
refuses stays the torch submodule, logged with the daemon's reason. A Part's
inputs are the submodule's placeholders that are not constants; its
constants are the parameters it reads, used in place when
publish_module published them on this client's daemon (the registry in
opd.dynamo), else copied into the Graph's own arena. Each call checks
that every constant is still the tensor it was made from at the same
version (torch bumps _version on an in-place update) and copies it again
into the constant's memory if not, so a model whose weights changed
keeps giving the eager results without a new definition. On the CPU a
call copies the inputs into staging tensors made once, runs the Graph
into outputs made once and returns torch clones of them: on the CPU opd
tensors (through cached torch views; the same tensors each call make the
run one prepared request, _graphrun.py), on CUDA torch CUDA tensors
(their storage imported into the daemon once; the run waits for torch's
queued work and is answered when done).
"""
import logging
import threading

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from . import _fxlower, _fxnorm, errors
from ._fxlower import Unsupported, meta, spec

log = logging.getLogger("opd.compile")


class Support(OperatorSupportBase):
    """The partitioner's question, answered by _fxlower.spec(); each refused
    node is logged once, with its reason."""

    def __init__(self, ops, devices):
        self.ops, self.devices = ops, devices
        self.answers = {}                 # node -> None or the reason
        self.fallbacks = []               # (what, reason) in graph order

    def is_node_supported(self, submodules, node):
        if node.op not in ("call_function", "call_method", "call_module"):
            return False
        if node in self.answers:
            return self.answers[node] is None
        try:
            spec(node, self.ops, self.devices)
            why = None
        except Unsupported as e:
            why = str(e)
            if _computes(node):       # not a call on no tensor (a log call)
                what = _fxlower.what(node)
                self.fallbacks.append((what, why))
                log.info("%s: %s", what, why)
        self.answers[node] = why
        return why is None


def _computes(node):
    """False for a call that takes and gives no tensor
    (torch._C._log_api_usage_once): torch runs it, with nothing to say."""
    return meta(node) is not None or any(
        meta(a) is not None for a in node.all_input_nodes)


def _static(ex):
    return isinstance(ex, torch.Tensor) and (
        isinstance(ex, torch.nn.Parameter) or
        getattr(ex, "_dynamo_static_input_type", None) is not None)


def compile_fx(c, gm, example_inputs, published=None):
    """The backend: gm with each supported subgraph replaced by a Part
    running it as one opd graph on client c. published: a function of a
    torch tensor returning its published opd Tensor (or None). Returns
    the callable dynamo runs, and the Parts made (as gm.opd_parts)."""
    ops, devices = set(c.ops()), c.devices()
    rewrites = _fxnorm.normalize(gm)
    log.debug("rewrites: %s", rewrites)
    if not torch.is_grad_enabled() and not any(
            n.op == "call_function" and n.target is torch._C._set_grad_enabled
            for n in gm.graph.nodes):
        for n in gm.graph.nodes:          # dynamo guards the grad mode: no
            n.meta["opd_no_grad"] = True  # output of this graph needs autograd
    values = {}                           # constant node name -> its tensor
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for n, ex in zip(phs, example_inputs):
        if _static(ex):
            n.meta["opd_const"] = True
            n.meta["opd_value"] = ex        # rules may read a constant's values
            values[n.name] = ex
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            v = gm
            for a in n.target.split("."):
                v = getattr(v, a)
            if isinstance(v, torch.Tensor):
                n.meta["opd_const"] = True
                n.meta["opd_value"] = v
                values[n.name] = v
    support = Support(ops, devices)
    partitioner = CapabilityBasedPartitioner(gm, support,
                                             allows_single_node_partition=True)
    parts = _chunks(partitioner.propose_partitions(), values, support)
    made = []
    if parts:
        gm = partitioner.fuse_partitions(parts)
        for node in list(gm.graph.nodes):
            if node.op == "call_module" and node.target.startswith("fused_"):
                sub = gm.get_submodule(node.target)
                try:
                    part = Part(c, sub, node, values, ops, devices, published)
                except (errors.OpdError, Unsupported) as e:  # torch runs it
                    why = ("the daemon refused it as a graph: %s" % e
                           if isinstance(e, errors.OpdError) else
                           "not lowered: %s" % e)
                    support.fallbacks.append((node.target, why))
                    log.info("%s (%d nodes): %s", node.target,
                             len(sub.graph.nodes), why)
                    continue
                setattr(gm, node.target, part)
                made.append(part)
    gm.opd_parts = made
    gm.opd_fallbacks = support.fallbacks
    return gm


CAT_INPUTS = 15          # a node's inputs: 16 tensors with its output
CHUNK_NODES = 512        # of OPD_MAX_GRAPH_NODES (1,024)
CHUNK_CONSTS = 512       # of OPD_MAX_GRAPH_CONSTS (1,024)


def _chunks(parts, values, support):
    """The partitions, each cut into runs of consecutive nodes (in the
    graph's order) under CHUNK_NODES nodes and CHUNK_CONSTS constants, and
    without the nodes the partitioner pulled in that opd does not take
    (getitem nodes of a supported producer: Swin's x[..., ::2, ::2, :]),
    which stay torch's between the runs."""
    from torch.fx.passes.infra.partitioner import Partition
    out, next_id = [], max([p.id for p in parts], default=0) + 1
    order = {}
    for p in parts:
        if not order and p.nodes:      # the graph's order is topological
            order = {m: i for i, m in enumerate(next(iter(p.nodes)).graph.nodes)}
        nodes = sorted(p.nodes, key=order.__getitem__)
        run, consts = [], set()
        pieces, dropped = [], 0
        for n in nodes:
            if support.answers.get(n) is not None:   # refused: a boundary
                dropped += 1
                if run:
                    pieces.append(run)
                run, consts = [], set()
                continue
            mine = {a for a in n.all_input_nodes if a.name in values}
            if run and (len(run) >= CHUNK_NODES or
                        len(consts | mine) > CHUNK_CONSTS):
                pieces.append(run)
                run, consts = [], set()
            run.append(n)
            consts |= mine
        if run:
            pieces.append(run)
        if len(pieces) == 1 and not dropped:
            out.append(p)
            continue
        if not dropped:
            log.info("a subgraph of %d nodes cut into %d opd graphs (graph "
                     "limits)", len(nodes), len(pieces))
        for run in pieces:
            out.append(Partition(id=next_id, nodes=run))
            next_id += 1
    return out


class _Const:
    """A constant of a Part: the tensor it was made from (`src`, its
    _version), where a call finds it (`arg`: the Part's argument index, or
    None for a module attribute), the layout (`transpose`: the weight of a
    linear as matmul's b) and the graph Value (its opd Tensor once the
    graph is defined)."""
    __slots__ = ("src", "version", "arg", "transpose", "value")

    def __init__(self, src, arg, transpose, value):
        self.src, self.version, self.arg = src, src._version, arg
        self.transpose, self.value = transpose, value

    def refresh(self, args):
        t = self.src if self.arg is None else args[self.arg]
        if t is self.src and t._version == self.version:
            return
        dst = self.value.tensor
        x = t.detach()
        if self.transpose:
            x = x.t()
        if dst.arena.base is not None:
            dst.torch().copy_(x)
        elif dst.arena.kind == "alloc":          # device memory of this client
            self.value.graph._c.run("copy", x.contiguous(), out=dst)
        else:
            raise RuntimeError("opd: a constant of this compiled graph changed "
                               "and its copy is not this process's to update")
        self.src, self.version = t, t._version


class Part(torch.nn.Module):
    """One opd graph in place of one fused submodule."""

    def __init__(self, c, sub, call, values, ops, devices, published):
        super().__init__()
        self.graph_name = call.target
        self._lock = threading.Lock()
        self._consts = []
        self._cache = {}                   # (node or tensor, transpose) -> Value
        self._published = published
        phs = [n for n in sub.graph.nodes if n.op == "placeholder"]
        dev = "cpu"
        for n in sub.graph.nodes:
            m = meta(n)
            if m is not None and m.device.type == "cuda":
                dev = "cuda:%d" % (m.device.index or 0)
        g = self.graph = c.graph(device=dev, name="torch.compile " + call.target)
        env, self._in_pos = {}, []
        for k, p in enumerate(phs):
            outer = call.args[k]
            if outer.name in values:
                env[p] = ("const", k if outer.op == "placeholder" else None,
                          values[outer.name])
            else:
                m = meta(outer) if meta(p) is None else meta(p)
                env[p] = g.input(p.name, tuple(m.shape),
                                 str(m.dtype).replace("torch.", ""))
                self._in_pos.append(k)
        done = set()
        out_node = None
        for n in sub.graph.nodes:
            if n.op == "placeholder" or n in done:
                continue
            if n.op == "output":
                out_node = n
                continue
            env[n] = self._emit(g, n, env, ops, devices, done)
        res = out_node.args[0]
        self._single = not isinstance(res, (tuple, list))
        outs = [res] if self._single else list(res)
        vals = [env[x] for x in outs]
        # a graph's outputs are node outputs: an input or constant given
        # back as it is (an identity in torch) is copied
        vals = [g.copy(v) if v.kind in ("input", "const") else v for v in vals]
        # one value given back twice (two FX outputs that became one opd
        # value, an identity between them) is one graph output, cloned twice
        uniq, self._out_index = [], []
        for v in vals:
            k = next((i for i, u in enumerate(uniq) if u is v), None)
            if k is None:
                k = len(uniq)
                uniq.append(v)
            self._out_index.append(k)
        g.output(*uniq)
        g.define()
        if dev == "cpu":      # opd tensors, written and read through torch views
            self._stage = [c.empty(v.shape, v.dtype) for v in g._inputs]
            self._outs = [c.empty(o.shape, o.dtype) for o in g.outputs]
            self._stage_views = [t.torch() for t in self._stage]
            self._out_views = [t.torch() for t in self._outs]
        else:                 # torch's CUDA tensors, imported once (same storage)
            self._stage = self._stage_views = [
                torch.empty(v.shape, dtype=getattr(torch, v.dtype), device=dev)
                for v in g._inputs]
            self._outs = self._out_views = [
                torch.empty(o.shape, dtype=getattr(torch, o.dtype), device=dev)
                for o in g.outputs]

    def _val(self, g, x, env, transpose=False):
        """The graph value of an argument: a node's, a constant's (made on
        first use), a number's (a 0-d float32 constant) or None."""
        if x is None:
            return None
        if isinstance(x, (int, float)):
            return g.const(float(x))
        if isinstance(x, torch.Tensor):        # a call_module's parameter
            ref = ("const", None, x)
        else:
            ref = env[x]
            if not (isinstance(ref, tuple) and ref[0] == "const"):
                return ref
        _, k, t = ref
        key = (id(t), transpose)
        v = self._cache.get(key)
        if v is None:
            pub = self._published(t) if self._published and not transpose else None
            if pub is not None and pub.device == g.device:
                v = g.const(pub)
            else:
                src = t.detach()
                v = g.const(src.t() if transpose else src)
            self._consts.append(_Const(t, k, transpose, v))
            self._cache[key] = v
        return v

    def _emit(self, g, n, env, ops, devices, done):
        op, ins, attrs = spec(n, ops, devices)
        if op == "=":
            return self._val(g, ins[0], env)
        if op == "pow":
            x = self._val(g, ins[0], env)
            v = x
            for _ in range(attrs["n"] - 1):
                v = g.mul(v, x)
            return v
        if op == "slices":                # x[::2, 1:, 0]: a slice per dim, a reshape
            v = self._val(g, ins[0], env)
            for d, start, end, step in attrs["cuts"]:
                kw = {"dim": d, "start": start, "step": step}
                if end is not None:
                    kw["end"] = end
                v = g.node("slice", v, **kw)
            return g.node("reshape", v, shape=attrs["shape"])
        if op == "roll":                  # per dim: cat(x[n-s:], x[:n-s])
            v = self._val(g, ins[0], env)
            for (d, k), size in zip(attrs["rolls"], attrs["sizes"]):
                v = g.node("cat", g.node("slice", v, dim=d, start=size - k, end=size),
                           g.node("slice", v, dim=d, start=0, end=size - k), dim=d)
            return v
        if op == "pad":                   # per dim: cat(value block, x, value block)
            return self._pad(g, n, ins, attrs, env)
        if op == "take":                  # x[index]: embedding of x's rows
            x, idx = self._val(g, ins[0], env), self._val(g, ins[1], env)
            xs = [int(d) for d in meta(ins[0]).shape]
            if len(xs) != 2:
                rest = 1
                for d in xs[1:]:
                    rest *= d
                x = g.node("reshape", x, shape=[xs[0], rest])
            v = g.node("embedding", x, idx)
            return v if len(xs) == 2 else g.node("reshape", v, shape=attrs["shape"])
        if op == "select":                # x[:, i]: slice, then the dim dropped
            shape = attrs.pop("shape")
            v = g.node("slice", self._val(g, ins[0], env), **attrs)
            return g.node("reshape", v, shape=shape)
        if op == "addmm":
            return self._addmm(g, n, ins, env, ops, devices, done)
        if op == "cat" and len(ins) > CAT_INPUTS:  # chained: the first 15, then 14 more each
            vs = [self._val(g, x, env) for x in ins]
            v = g.node("cat", *vs[:CAT_INPUTS], **attrs)
            for k in range(CAT_INPUTS, len(vs), CAT_INPUTS - 1):
                v = g.node("cat", v, *vs[k:k + CAT_INPUTS - 1], **attrs)
            return v
        if op != "linear":
            return g.node(op, *[self._val(g, x, env) for x in ins], **attrs)
        x, w, b = ins
        if "linear" in ops:
            act, user = _fxlower.fused_act(n, ops, devices)
            v = g.linear(self._val(g, x, env), self._val(g, w, env),
                         self._val(g, b, env), act=act or "none")
            if user is not None:
                env[user] = v
                done.add(user)
            return v
        v = g.matmul(self._val(g, x, env), self._val(g, w, env, transpose=True))
        return v if b is None else g.add(v, self._val(g, b, env))

    def _pad(self, g, n, ins, attrs, env):
        """F.pad by constants: a negative pad cuts (slice), a positive one
        joins a constant block of the value (cat), dim by dim."""
        v, shape = self._val(g, ins[0], env), list(attrs["shape"])
        x = meta(ins[0])
        for d, lo, hi in attrs["pads"]:
            if lo < 0 or hi < 0:
                v = g.node("slice", v, dim=d, start=max(-lo, 0),
                           end=shape[d] - max(-hi, 0))
                shape[d] -= max(-lo, 0) + max(-hi, 0)
                lo, hi = max(lo, 0), max(hi, 0)
            parts = []
            for k in (lo, hi):
                blk = shape[:d] + [k] + shape[d + 1:]
                parts.append(g.const(torch.full(blk, attrs["value"], dtype=x.dtype,
                                                device=x.device)) if k else None)
            v = g.node("cat", *[p for p in (parts[0], v, parts[1]) if p is not None], dim=d)
            shape[d] += lo + hi
        return v

    def _addmm(self, g, n, ins, env, ops, devices, done):
        """x @ w + b: opd's linear with w transposed once where w is a
        constant (its activation fused), else matmul and add."""
        x, w, b = ins
        ref = env.get(w) if not isinstance(w, torch.Tensor) else ("const",)
        if isinstance(ref, tuple) and ref[0] == "const" and "linear" in ops:
            act, user = _fxlower.fused_act(n, ops, devices)
            v = g.linear(self._val(g, x, env), self._val(g, w, env, transpose=True),
                         self._val(g, b, env), act=act or "none")
            if user is not None:
                env[user] = v
                done.add(user)
            return v
        return g.add(g.matmul(self._val(g, x, env), self._val(g, w, env)),
                     self._val(g, b, env))

    def forward(self, *args):
        with self._lock:
            for k in self._consts:
                k.refresh(args)
            for v, k in zip(self._stage_views, self._in_pos):
                v.copy_(args[k])
            self.graph.run(*self._stage, out=self._outs)
            outs = [self._out_views[k].clone() for k in self._out_index]
        return outs[0] if self._single else tuple(outs)

