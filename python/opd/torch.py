"""opd.torch: every operator of an opd daemon as torch.ops.opd.<name>.

    import opd.torch                      # registers the ops of $OPD_SOCKET's daemon
    y = torch.ops.opd.softmax(x, dim=-1)  # x: a torch CPU or CUDA tensor
    y = torch.ops.opd.scale(x, a=2.0)     # plugin ops too (docs/operators.md)

DESIGN
Each op the daemon lists (OPS: built-ins and plugins alike) becomes a
torch custom op through torch.library.custom_op (torch >= 2.4; an older
torch makes the import fail with one ImportError naming the version
needed). Its torch schema comes from the op's opd schema: the inputs as
Tensor arguments (optional inputs `Tensor? = None`; a variadic op, noop,
takes `Tensor[]`), the attributes as keyword-only arguments with their
types and defaults (int, float, bool, str, int[]), the outputs as the
returned Tensor(s). The real implementation runs the op in the daemon:
CPU tensors go through shared memory (an input is copied into an arena
unless it already lies in one of the client's arenas, as the output of an
earlier torch.ops.opd call does; the outputs are zero-copy torch views of
the arena memory the daemon wrote), CUDA inputs are used in place
(imported by CUDA IPC handle, the path of Client.from_torch, cached per
storage) and the outputs are allocated in the daemon's device memory and
returned as zero-copy torch CUDA views (Tensor.torch()). The fake (meta) implementation asks the daemon's
shape rule (an INFER request, cached per shapes and attributes) for the
outputs' dtypes and shapes, so torch.compile and opcheck trace the ops
without running them. The ops mutate nothing (mutates_args=()).

Registration is process-wide, as torch's is: the first register() (or
the import, when a daemon answers at the default socket) binds every op
to one Client; register(client) later rebinds them to another daemon and
adds the ops that are new there.
"""
import ctypes
import re
import threading

import torch as _torch

NEEDED = (2, 4)


def _version(v):
    m = re.match(r"(\d+)\.(\d+)", v)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


if _version(_torch.__version__) < NEEDED or not hasattr(_torch.library, "custom_op"):
    raise ImportError("opd.torch needs torch >= %d.%d (torch.library.custom_op); "
                      "this is torch %s" % (NEEDED + (_torch.__version__,)))

from . import _lib, errors, protocol  # noqa: E402
from .client import connect  # noqa: E402
from .tensor import Tensor, dtype_name  # noqa: E402

NAMESPACE = "opd"
_lock = threading.RLock()
_client = None          # the Client every registered op runs on
_ops = {}               # name -> (torch op, opd schema)
_infer_cache = {}

_TORCH_TYPES = {"int": "int", "float": "float", "bool": "bool", "str": "str",
                "ints": "int[]"}


def _literal(kind, v):
    if kind == "float":
        return repr(float(v))
    if kind == "int":
        return str(int(v))
    if kind == "bool":
        return "True" if v else "False"
    if kind == "str":
        return '"%s"' % str(v).replace("\\", "\\\\").replace('"', '\\"')
    if kind == "ints":
        return "[%s]" % ", ".join(str(int(x)) for x in v)
    raise ValueError(kind)


def _variadic(schema):
    return schema["max_inputs"] > len(schema["inputs"])


def torch_schema(schema):
    """The torch schema string of an opd op schema (Client.ops()[name]):
    "(Tensor x, *, float a=1.0, float b=0.0) -> Tensor"."""
    args = []
    if _variadic(schema):
        args.append("Tensor[] %s" % schema["inputs"][0]["name"])
    else:
        for i, io in enumerate(schema["inputs"]):
            if i >= schema["min_inputs"]:
                args.append("Tensor? %s=None" % io["name"])
            else:
                args.append("Tensor %s" % io["name"])
    if schema["attrs"]:
        args.append("*")
    for a in schema["attrs"]:
        t = _TORCH_TYPES[a["type"]]
        if a["required"]:
            args.append("%s %s" % (t, a["name"]))
        else:
            args.append("%s %s=%s" % (t, a["name"], _literal(a["type"], a["default"])))
    n_out = len(schema["outputs"])
    ret = "()" if n_out == 0 else "Tensor" if n_out == 1 else \
        "(%s)" % ", ".join(["Tensor"] * n_out)
    return "(%s) -> %s" % (", ".join(args), ret)


def _split(schema, args, kwargs):
    """(inputs, attrs) of one call: inputs a list of tensors without the
    trailing Nones, attrs a dict of attribute values."""
    if _variadic(schema):
        ins = list(args[0]) if args else list(kwargs.get(schema["inputs"][0]["name"], ()))
        rest = list(args[1:])
    else:
        n = len(schema["inputs"])
        ins = list(args[:n])
        rest = list(args[n:])
        for io in schema["inputs"][len(ins):]:
            ins.append(kwargs.get(io["name"]))
    attrs = {}
    for a in schema["attrs"]:
        if rest:
            v = rest.pop(0)
        elif a["name"] in kwargs:
            v = kwargs[a["name"]]
        elif not a["required"]:
            v = a["default"]
        else:
            continue
        if a["type"] == "ints":
            v = [int(x) for x in v]
        elif a["type"] == "float":
            v = float(v)
        attrs[a["name"]] = v
    while ins and ins[-1] is None:
        ins.pop()
    return ins, attrs


def _infer(c, name, schema, ins, attrs):
    """[(torch dtype, shape)] of the outputs, from the daemon's shape rule
    (INFER). Works on fake tensors: only dtypes and shapes are read."""
    specs = []
    for i, t in enumerate(ins):
        if t is None:
            raise errors.error(protocol.EINVAL, "%s: input %d is None but a "
                               "later input is given" % (name, i))
        specs.append((dtype_name(t.dtype), tuple(int(d) for d in t.shape)))
    key = (name, tuple(specs), tuple(sorted((k, tuple(v) if isinstance(v, list)
                                              else v) for k, v in attrs.items())))
    hit = _infer_cache.get(key)
    if hit is not None:
        return hit
    h = c._handle()
    descs = (_lib.TensorDesc * max(1, len(specs)))()
    for d, (dt, shape) in zip(descs, specs):
        if len(shape) > protocol.MAX_RANK:
            raise errors.error(protocol.ELIMIT, "%s: rank %d out of 0..%d"
                               % (name, len(shape), protocol.MAX_RANK))
        d.dtype = protocol.DTYPE_CODES[dt]
        d.rank = len(shape)
        d.shape[:len(shape)] = shape
    attr_arr, keep, akey = c._attrs(schema, attrs)
    outs = (_lib.TensorDesc * protocol.MAX_TENSORS)()
    n_out = ctypes.c_uint32()
    errors.check(c._lib.opd_infer(h, name.encode(), descs if specs else None,
                                  len(specs), attr_arr, len(akey), outs,
                                  protocol.MAX_TENSORS, ctypes.byref(n_out)))
    r = tuple((getattr(_torch, protocol.DTYPE_NAMES[o.dtype]),
               tuple(o.shape[:o.rank])) for o in outs[:n_out.value])
    if len(_infer_cache) > 4096:
        _infer_cache.clear()
    _infer_cache[key] = r
    return r


def _returned(outs):
    outs = tuple(outs)
    if not outs:
        return None
    return outs[0] if len(outs) == 1 else outs


def _in_arena(c, t):
    """An opd Tensor over torch CPU tensor t, with no copy, when t's bytes
    lie in one of c's shared-memory arenas (a torch view of an opd Tensor,
    e.g. the output of an earlier torch.ops.opd call); else t itself (run
    copies it in). The Tensor keeps t alive."""
    alloc = c._alloc
    if alloc is None or not t.is_contiguous() or t.dtype == _torch.bool:
        return t
    p, n = t.data_ptr(), t.numel() * t.element_size()
    for st in list(alloc._states):
        a = st.arena
        if a.base <= p and p + n <= a.base + a.size:
            return Tensor(a, p - a.base, dtype_name(t.dtype), tuple(t.shape), None, t)
    return t


def _in_device_view(c, t):
    """The opd Tensor behind torch CUDA tensor t when t is (part of) a
    zero-copy view of one of c's device arenas (the output of an earlier
    torch.ops.opd call on CUDA): that memory is the daemon's, not torch's,
    so it has no torch IPC handle; the run uses the arena in place. Else t
    (run imports its storage by IPC handle)."""
    maps = c._maps
    if not maps or not t.is_contiguous():
        return t
    p, n = t.data_ptr(), t.numel() * t.element_size()
    for m in list(maps.values()):
        if m.ptr <= p and p + n <= m.ptr + m.size:
            for v in list(m.views):
                return Tensor(v.tensor.arena, p - m.ptr, dtype_name(t.dtype),
                              tuple(t.shape), None, t)
    return t


def _make(name, schema):
    def real(*args, **kwargs):
        c = client()
        ins, attrs = _split(schema, args, kwargs)
        cuda = [t for t in ins if t is not None and t.is_cuda]
        if cuda:
            # inputs in place (IPC import, cached per storage); outputs in
            # the daemon's device memory, returned as zero-copy torch views
            dev = cuda[0].device
            ins = [_in_device_view(c, t.contiguous()) if t is not None else None
                   for t in ins]
            res = c.run(name, *ins, device="cuda:%d" % dev.index, **attrs)
        else:
            ins = [_in_arena(c, t) if t is not None else None for t in ins]
            res = c.run(name, *ins, device="cpu", **attrs)
        if res is None:
            return None
        res = res if isinstance(res, tuple) else (res,)
        return _returned(r.torch() for r in res)

    def fake(*args, **kwargs):
        ins, attrs = _split(schema, args, kwargs)
        dev = ins[0].device if ins else _torch.device("cpu")
        return _returned(_torch.empty(shape, dtype=dt, device=dev)
                         for dt, shape in _infer(client(), name, schema, ins, attrs))

    op = _torch.library.custom_op("%s::%s" % (NAMESPACE, name), real,
                                  mutates_args=(), schema=torch_schema(schema))
    op.register_fake(fake)
    return op


def client():
    """The Client the registered ops run on (connecting to $OPD_SOCKET's
    daemon on first use)."""
    global _client
    with _lock:
        if _client is None or _client.closed:
            _client = connect()
        return _client


def register(c=None, socket=None):
    """Registers torch.ops.opd.<name> for every op of the daemon of Client
    c (or a new connection to `socket`, or to the default socket) and binds
    every registered op to it. Returns the names registered by this call
    (ops registered earlier are rebound, not registered again)."""
    global _client
    with _lock:
        if c is None:
            c = connect(socket)
        _client = c
        _infer_cache.clear()
        new = []
        for name, schema in c.ops().items():
            if name in _ops:
                continue
            _ops[name] = (_make(name, schema), schema)
            new.append(name)
        return new


def ops():
    """{name: torch op} of the registered ops (torch.ops.opd.<name>)."""
    return {n: getattr(getattr(_torch.ops, NAMESPACE), n) for n in _ops}


try:
    register()
except errors.OpdError:
    pass  # no daemon at the default socket: call opd.torch.register(...)
