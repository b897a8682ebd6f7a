"""opd.dynamo: the torch.compile backend "opd", and a module's parameters
published once for graphs to use as constants.

    import opd.torch                     # registers the backend (torch >= 2.4)
    fast = torch.compile(model, backend="opd")
    fast = torch.compile(model, backend=opd.dynamo.Backend(client))
    consts = opd.torch.publish_module(client, model, "mlp-v1")
    same = opd.torch.attach_module(other_client, "mlp-v1")

DESIGN
This module imports without torch (or with a torch older than 2.4, such
as Debian's 1.13): why_not() then says what is missing, and Backend and
register() raise ImportError with that reason. The work is done by
_fxgraph.py (partition, one opd graph per supported subgraph, the
runtime module) over _fxlower.py (the support table), imported on the
first compile. register() adds "opd" to torch._dynamo's backends once
per process (opd.torch calls it with its client getter, so the backend
runs on the client torch.ops.opd uses; Backend(client) names another).

publish_module() packs a module's parameters and buffers into one
arena: a header (8 bytes "OPDMOD1\\0", the JSON table's length as a
little-endian uint64, the JSON table: name, dtype, shape, offset of each
tensor, tied names once) and the tensors at 64-byte aligned offsets, and
publishes it under a name (Client.publish: one arena, one name, read-only
for attachers). It returns {name: opd Tensor} on the publisher's copy and
records each parameter's tensor in a registry (weakly, with its
_version), so the backend uses those copies as graph constants instead
of copying the parameters again. attach_module() reads the table back
through an attachment (two small copies) and returns the same mapping on
the attached arena, for graphs of another client or process.
"""
import json
import re
import threading
import weakref

from .tensor import Tensor, dtype_name

NEEDED = (2, 4)
MAGIC = b"OPDMOD1\0"
_lock = threading.Lock()
_registered = []            # [client getter] once the backend is registered
_published = {}             # id(torch tensor) -> (weakref, opd Tensor, client)


def why_not():
    """None when the backend can be used, else why not (torch missing or
    older than 2.4, or without torch.fx's capability-based partitioner)."""
    try:
        import torch
    except ImportError as e:
        return "opd.dynamo needs torch >= %d.%d: %s" % (NEEDED + (e,))
    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    v = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    if v < NEEDED:
        return ("opd.dynamo needs torch >= %d.%d (torch.compile and "
                "torch.fx's CapabilityBasedPartitioner); this is torch %s"
                % (NEEDED + (torch.__version__,)))
    try:
        from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner  # noqa: F401
    except ImportError as e:
        return "opd.dynamo: torch %s has no partitioner: %s" % (torch.__version__, e)
    return None


def available():
    """True when the backend can be used (see why_not)."""
    return why_not() is None


def _need():
    why = why_not()
    if why is not None:
        raise ImportError(why)


class Backend:
    """A torch.compile backend on one opd Client: `torch.compile(model,
    backend=Backend(c))` (backend="opd" uses the client opd.torch runs
    its ops on). Each call gets dynamo's FX graph and example inputs and
    returns the graph with every supported subgraph as one opd graph
    (opd._fxgraph): `last` is that GraphModule (its `opd_parts`, the Parts
    with their opd Graphs, and `opd_fallbacks`, [(node, reason)] of the
    nodes left to torch), `compiled` the number of graphs dynamo gave."""

    def __init__(self, client=None):
        _need()
        self._client = client
        self.last = None
        self.compiled = 0

    def client(self):
        if self._client is not None:
            return self._client
        if not _registered:
            raise RuntimeError("opd.dynamo: no client: import opd.torch, or "
                               "use Backend(client)")
        return _registered[0]()

    def __call__(self, gm, example_inputs):
        from . import _fxgraph
        out = _fxgraph.compile_fx(self.client(), gm, example_inputs, published)
        self.last = out
        self.compiled += 1
        return out


def register(client_getter):
    """Registers the torch.compile backend "opd" (once per process; a later
    call only changes the client getter). Raises ImportError where
    why_not() says why not."""
    _need()
    with _lock:
        if _registered:
            _registered[0] = client_getter
            return
        import torch._dynamo
        _registered.append(client_getter)
        backend = Backend()

        def opd(gm, example_inputs):
            return backend(gm, example_inputs)
        opd.backend = backend
        torch._dynamo.register_backend(opd, name="opd")


def published(t):
    """The opd Tensor publish_module made of torch tensor t, while t is
    the same tensor at the same version; else None."""
    e = _published.get(id(t))
    if e is None or e[0]() is not t or e[3] != t._version:
        return None
    return e[1]


def _tensors(module):
    """[(name, tensor)] of the module's parameters and buffers, tied ones
    under each name."""
    seen = []
    for name, p in module.named_parameters(remove_duplicate=False):
        seen.append((name, p))
    for name, b in module.named_buffers(remove_duplicate=False):
        if b is not None:
            seen.append((name, b))
    return seen


def publish_module(client, module, name, readers=None):
    """Publishes the parameters and buffers of torch module `module` under
    `name` (Client.publish's rules: this uid's name until unpublished or
    this client closes; readers as there), packed into one arena, and
    returns {parameter name: opd Tensor} on this client's copy: use them
    as graph constants (g.const), and torch.compile(backend="opd") uses
    them for these parameters, while they are unchanged, with no copy of
    its own. Device tensors are copied to host memory."""
    _need()
    import numpy as np
    import torch
    tensors, table, first, size = _tensors(module), [], {}, 0
    for pname, t in tensors:
        if id(t) in first:
            table.append({"name": pname, "same": first[id(t)]})
            continue
        first[id(t)] = pname
        table.append({"name": pname, "dtype": dtype_name(t.dtype),
                      "shape": list(t.shape), "offset": size})
        size += (t.numel() * t.element_size() + 63) & ~63
    head = json.dumps({"tensors": table}, separators=(",", ":")).encode()
    base = (16 + len(head) + 63) & ~63
    packed = np.zeros(base + size, np.uint8)
    packed[:8] = np.frombuffer(MAGIC, np.uint8)
    packed[8:16] = np.frombuffer(len(head).to_bytes(8, "little"), np.uint8)
    packed[16:16 + len(head)] = np.frombuffer(head, np.uint8)
    for e, (pname, t) in zip(table, tensors):
        if "same" in e or not t.numel():
            continue
        raw = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
        packed[base + e["offset"]:base + e["offset"] + raw.size] = raw
    own = client.publish(name, packed, readers=readers)
    out = _mapping(table, own.arena, own.offset + base, own)
    for pname, t in tensors:
        _published[id(t)] = (weakref.ref(t), out[pname], client, t._version)
    return out


def _mapping(table, arena, base, keep):
    out = {}
    for e in table:
        if "same" in e:
            out[e["name"]] = out[e["same"]]
        else:
            out[e["name"]] = Tensor(arena, base + e["offset"], e["dtype"],
                                    tuple(e["shape"]), None, keep)
    return out


def attach_module(client, name):
    """The attach side of publish_module: {parameter name: opd Tensor}
    (read-only, on the published arena, no copy of the tensors) of what
    was published under `name`. Raises BadArgumentError (ENOENT) for an
    unknown name, ValueError for a publication that is not a module's."""
    t = client.attach(name)
    head = t[0:16].numpy().tobytes() if t.shape[0] >= 16 else b""
    if head[:8] != MAGIC or t.dtype != "uint8":
        raise ValueError("opd: %r was not published by publish_module" % name)
    n = int.from_bytes(head[8:16], "little")
    table = json.loads(t[16:16 + n].numpy().tobytes())["tensors"]
    return _mapping(table, t.arena, t.offset + ((16 + n + 63) & ~63), t)
