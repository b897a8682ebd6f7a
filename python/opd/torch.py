"""opd.torch: every operator of an opd daemon as torch.ops.opd.<name>.

    import opd.torch                      # registers the ops of $OPD_SOCKET's daemon
    y = torch.ops.opd.softmax(x, dim=-1)  # x: a torch CPU or CUDA tensor
    y = torch.ops.opd.scale(x, a=2.0)     # plugin ops too (docs/operators.md)

    torch.ops.opd.softmax_out(x, out=y)   # out= variant: writes y
    torch.ops.opd.relu_(x)                # in-place form (OPD_OPF_INPLACE ops)

    fast = torch.compile(model, backend="opd")      # opd.dynamo: graphs

DESIGN
Each op the daemon lists (OPS: built-ins and plugins alike) becomes a
torch operator defined with torch.library.Library define/impl and a fake
implementation from torch.library.register_fake (torch >= 2.4; an older
torch makes the import fail with one ImportError naming the version
needed). That is the low-level form of torch.library.custom_op: a call
crosses fewer Python wrappers, and the out= forms may take their outputs
as keyword-only Tensors (custom_op refuses those). Its torch schema comes
from the op's opd schema: the inputs as Tensor arguments (optional inputs
`Tensor? = None`; a variadic op, noop, takes `Tensor[]`), the attributes
as keyword-only arguments with their types and defaults (int, float,
bool, str, int[]), the outputs as the returned Tensor(s). Two more forms:
  <name>_out  every op with outputs: the inputs, then keyword-only
              `Tensor(a!) out` (several outputs: out_<output name>, each
              mutated) and the attributes; writes the outputs into the given
              tensors (dtype and shape must be the op's) and returns None
  <name>_     ops whose row is OPD_OPF_INPLACE (the OPS reply's "inplace")
              with one output: `Tensor(a!) x` first; writes the output over
              the first input (its dtype and shape must be the output's)
              and returns None
torch's semantics where the daemon's are narrower (_torchsem.py: scalar
operands as overloads <name>.Scalar / .np_scalar, type promotion and
torch's argument forms on the CPU path and in the fake implementation)
and torch's signatures (_torchsig.py: overloads <name>.torch).
Each form has two real implementations, one per device, so that a call
runs the op in the daemon one way only:
  CUDA  libopd's C kernel for torch's CUDA dispatch key (client/torch/,
        registered here by _c_kernel for every form: functional, _out,
        in-place, variadic inputs; torch >= 2.10): torch's memory used in
        place, the run ordered with torch's current stream, no Python in
        the call. Without it (an older torch, a libopd built with
        TORCH=0, a form torch refused) a call on CUDA tensors raises
        BackendError naming what is missing (_no_cuda).
  CPU   the Python implementation (_torchops.py: per-signature plans,
        staging reused, no INFER per call), registered for every backend
        (CompositeExplicitAutograd): an input is copied into a cached
        staging tensor of shared memory unless it already lies in one of
        the client's arenas (as the output of an earlier torch.ops.opd
        call does); the outputs are zero-copy torch views of the arena
        memory the daemon wrote. cpu_kernels() adds libopd's C kernel for
        the CPU key (_torchcpu.py): calls already in shared memory then
        run with no Python, the others still here.
Which CPU tensors reach the daemon with no copy: docs/python.md.
The fake implementation asks the daemon's shape rule (an INFER request,
cached per shapes and attributes) for the outputs' dtypes and shapes (and
checks given outputs against them), so torch.compile and opcheck trace
the ops without running them.

Registration is process-wide, as torch's is: the first register() (or
the import, when a daemon answers at the default socket) binds every op
to one Client; register(client) later rebinds them to another daemon and
adds the ops that are new there. The import also registers the
torch.compile backend "opd" (opd.dynamo) and exports publish_module /
attach_module from there.
"""
import ctypes
import re
import threading

import torch as _torch

NEEDED = (2, 4)


def _version(v):
    m = re.match(r"(\d+)\.(\d+)", v)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


if _version(_torch.__version__) < NEEDED or not hasattr(_torch.library, "register_fake"):
    raise ImportError("opd.torch needs torch >= %d.%d (torch.library.register_fake); "
                      "this is torch %s" % (NEEDED + (_torch.__version__,)))

from . import _lib, _torchops, _torchsem, _torchsig, errors, protocol  # noqa: E402
from .client import connect  # noqa: E402
from .tensor import Tensor, dtype_name  # noqa: E402

NAMESPACE = "opd"
_lock = threading.RLock()
_client = None          # the Client every registered op runs on
_ops = {}               # name -> (torch op, opd schema), variants too
_runners = {}           # op name -> _torchops.OpRunner (its calls' plans)
_daemon_names = set()   # the ops of the daemons registered from
_infer_cache = {}
_library = None         # the torch.library.Library fragment of the ops

_ckernels = {}          # torch name -> 1: its CUDA kernel is libopd's C one
C_TORCH = (2, 10)       # the torch whose stable C ABI the C kernels use
_cstate = {}            # "lib", "why", "cb", "failed": the C kernels' state

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


def out_names(schema):
    """The out= arguments of an op's out variant: "out" for one output,
    "out_<name>" for each of several."""
    outs = schema["outputs"]
    if len(outs) == 1:
        return ["out"]
    return ["out_%s" % o["name"] for o in outs]


def _letters(n):
    return [chr(ord("a") + i) if i < 26 else "a%d" % i for i in range(n)]


def out_schema(schema):
    """The torch schema of <name>_out, the op writing into given tensors:
    the inputs, then keyword-only the outputs (mutated) and attributes;
    returns nothing: "(Tensor x, *, Tensor(a!) out, float a=1.0) -> ()"."""
    args, ret = torch_schema(schema)[1:].split(") -> ")
    outs = ["Tensor(%s!) %s" % (l, n) for l, n in zip(_letters(len(schema["outputs"])),
                                                        out_names(schema))]
    parts = [a for a in args.split(", ") if a] if args else []
    if "*" in parts:
        i = parts.index("*")
        parts[i + 1:i + 1] = outs
    else:
        parts += ["*"] + outs
    return "(%s) -> ()" % ", ".join(parts)


def inplace_schema(schema):
    """The torch schema of <name>_, the in-place form (the output written
    into the first input): "(Tensor(a!) x, *, float a=1.0) -> ()"."""
    args = torch_schema(schema)[1:].split(") -> ")[0]
    first = "Tensor %s" % schema["inputs"][0]["name"]
    assert args.startswith(first), args
    return "(Tensor(a!) %s%s) -> ()" % (schema["inputs"][0]["name"], args[len(first):])


def has_inplace(schema):
    """True when the op gets <name>_: its row is OPD_OPF_INPLACE, one
    output, a first input that is not variadic."""
    return (bool(schema.get("inplace")) and len(schema["outputs"]) == 1 and
            bool(schema["inputs"]) and schema["min_inputs"] >= 1 and
            not _variadic(schema))


def _infer(c, name, schema, ins, attrs):
    """[(torch dtype, shape)] of the outputs (INFER, cached)."""
    return _torchops.infer(c, name, schema, ins, attrs, _infer_cache)


def _fake_specs(c, name, schema, run, args, kwargs):
    """[(torch dtype, shape)] of the outputs of a call of <name> with
    these arguments, torch's semantics applied (_torchsem.adjust) as the
    real call applies them; works on fake tensors."""
    ins, attrs, _ = run.split(args, kwargs)
    adj = _torchsem.adjust(name, ins, attrs) if name in _torchsem.RULES else None
    if adj is None:
        return _infer(c, name, schema, ins, attrs)
    op, ins, attrs, drop = adj
    specs = _infer(c, op, _ops[op][1], ins, attrs)
    return [(dt, tuple(shape[:-1]) if drop else shape) for dt, shape in specs]


def _returned(outs):
    outs = tuple(outs)
    if not outs:
        return None
    return outs[0] if len(outs) == 1 else outs


def _in_arena(c, t):
    """An opd Tensor over torch CPU tensor t, with no copy, when t's bytes
    lie in one of c's shared-memory arenas (a torch view of an opd Tensor,
    e.g. the output of an earlier torch.ops.opd call); else t itself."""
    loc = _torchops.in_arena(c, t)
    if loc is None:
        return t
    return Tensor(loc[0], loc[1], dtype_name(t.dtype), tuple(t.shape), None, t)


def _in_device_view(c, t):
    """The opd Tensor behind torch CUDA tensor t when t is (part of) a
    zero-copy view of one of c's device arenas (Tensor.torch() of a device
    tensor: the daemon's memory, not torch's); else t."""
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


def _bound():
    c = _client
    if c is None or c._closed:
        c = client()
    return c


def _check_outs(name, schema, specs, outs):
    for k, (o, (dt, shape)) in enumerate(zip(outs, specs)):
        if o.dtype != dt or tuple(o.shape) != tuple(shape):
            raise errors.error(protocol.EINVAL, "%s: output %d has dtype %s and "
                               "shape %s; the op's output here is %s %s"
                               % (name, k, dtype_name(o.dtype), tuple(o.shape),
                                  dtype_name(dt), tuple(shape)))


def _define(name, fn, fake, schema_str):
    """Registers opd::<name> (schema_str) with real implementation fn
    (CompositeExplicitAutograd: every backend) and fake implementation fake,
    through torch.library.Library define/impl: a call crosses fewer Python
    layers than one of a torch.library.custom_op, and kwarg-only Tensor
    arguments (out=) are allowed. Returns torch.ops.opd.<name>."""
    global _library
    if _library is None:
        _library = _torch.library.Library(NAMESPACE, "FRAGMENT")
    _library.define(name + schema_str)
    _library.impl(name, fn, "CompositeExplicitAutograd")
    _torch.library.register_fake("%s::%s" % (NAMESPACE, name), fake, lib=_library)
    return getattr(getattr(_torch.ops, NAMESPACE), name)


def _overload(name):
    """define(overload, schema string, fn): registers opd::<name>.<overload>
    with fn as its CompositeImplicitAutograd kernel (it calls other
    overloads: every backend and fake tensors go through those)."""
    def define(overload, schema_str, fn):
        full = "%s.%s" % (name, overload)
        _library.define(full + schema_str)
        _library.impl(full, fn, "CompositeImplicitAutograd")
    return define


def _no_cuda(tname):
    """The error of torch.ops.opd.<tname> on CUDA tensors where libopd's C
    kernel does not serve it (the only CUDA path)."""
    why = c_kernels_failed().get(tname) or c_kernels_why() or \
        "no C kernel was registered for this form"
    return errors.error(protocol.EBACKEND, "opd.torch: torch.ops.opd.%s on "
                        "CUDA tensors runs libopd's C kernel, which needs "
                        "torch >= %d.%d (its stable C ABI) and a libopd built "
                        "with it (make TORCH=1); this is torch %s: %s"
                        % ((tname,) + C_TORCH + (_torch.__version__, why)))


def _make(name, schema):
    run = _torchops.OpRunner(name, schema, _no_cuda, _runners)
    _runners[name] = run
    onames = out_names(schema)
    made = {}

    def real(*args, **kwargs):
        return _returned(run.call(_bound(), args, kwargs))

    def fake(*args, **kwargs):
        ins = run.split(args, kwargs)[0]
        dev = ins[0].device if ins else _torch.device("cpu")
        return _returned(_torch.empty(shape, dtype=dt, device=dev) for dt, shape
                         in _fake_specs(client(), name, schema, run, args, kwargs))

    made[name] = _define(name, real, fake, torch_schema(schema))
    _c_kernel(name, schema, FUNCTIONAL)
    _torchsem.scalar_overloads(_overload(name), name, torch_schema(schema))
    _torchsig.torch_overloads(_overload(name), name)

    if onames and name + "_out" not in _daemon_names:
        def real_out(*args, **kwargs):
            outs = [kwargs.pop(n) for n in onames]
            run.call(_bound(), args, kwargs, outs, name + "_out")

        def fake_out(*args, **kwargs):
            outs = [kwargs.pop(n) for n in onames]
            _check_outs(name + "_out", schema,
                        _fake_specs(client(), name, schema, run, args, kwargs), outs)

        made[name + "_out"] = _define(name + "_out", real_out, fake_out,
                                      out_schema(schema))
        _c_kernel(name, schema, OUT)

    if has_inplace(schema) and name + "_" not in _daemon_names:
        def real_(*args, **kwargs):
            x = args[0] if args else kwargs[schema["inputs"][0]["name"]]
            run.call(_bound(), args, kwargs, [x], name + "_")

        def fake_(*args, **kwargs):
            x = args[0] if args else kwargs[schema["inputs"][0]["name"]]
            _check_outs(name + "_", schema,
                        _fake_specs(client(), name, schema, run, args, kwargs), [x])

        made[name + "_"] = _define(name + "_", real_, fake_, inplace_schema(schema))
        _c_kernel(name, schema, INPLACE)
    return made


_ATTR_CODES = {"int": 1, "float": 2, "bool": 3, "str": 4, "ints": 5}
# opd_torch_kernel's forms (include/opd/opd.h: OPD_TORCH_*) and their suffix
FUNCTIONAL, INPLACE, OUT, VARIADIC = 0, 1, 2, 0x10
_SUFFIX = {FUNCTIONAL: "", INPLACE: "_", OUT: "_out"}


def _c_lib():
    """libopd when its C kernels can serve torch's CUDA dispatch key here
    (client/torch/: torch >= 2.10 exports the C shims they use), else
    None; the reason is kept in c_kernels_why()."""
    if "lib" in _cstate:
        return _cstate["lib"]
    lib, why = None, ""
    try:
        cand = _lib.load()
    except Exception as e:              # no libopd: a CUDA call says so
        cand, why = None, str(e)
    f = getattr(cand, "opd_torch_available", None) if cand else None
    if cand is not None and f is None:
        why = "this libopd has no torch kernels (built with TORCH=0)"
    elif f is not None:
        buf = ctypes.create_string_buffer(200)
        if f(buf, len(buf)):
            lib = cand
            # a call after fork() or with no connection bound asks for one
            cb = ctypes.CFUNCTYPE(ctypes.c_void_p)(_c_rebind)
            _cstate["cb"] = cb
        else:
            why = buf.value.decode(errors="replace")
    _cstate["lib"], _cstate["why"] = lib, why
    return lib


def c_kernels_why():
    """Why libopd's C kernels cannot serve torch.ops.opd.* on CUDA tensors
    here, so that such calls raise BackendError ("" when they serve
    them)."""
    _c_lib()
    return _cstate["why"]


def _c_bind(c):
    lib = _c_lib()
    if lib is not None and c is not None and not c.closed:
        lib.opd_torch_bind(c._handle(), ctypes.cast(_cstate["cb"], ctypes.c_void_p))


def _c_rebind():
    try:
        _c_bind(_bound())
    except Exception:                   # the C kernel names the problem
        pass
    return None


def _c_kernel(name, schema, form):
    """Registers libopd's C kernel as the CUDA kernel of one form of
    opd::<name> (FUNCTIONAL: <name>, INPLACE: <name>_, OUT: <name>_out).
    An op with no tensor input has no CUDA call to serve."""
    lib = _c_lib()
    if lib is None or not schema["inputs"]:
        return
    attrs = schema["attrs"]
    if any(a["type"] not in _ATTR_CODES for a in attrs):
        return
    names = (ctypes.c_char_p * max(1, len(attrs)))(*[a["name"].encode() for a in attrs])
    types = (ctypes.c_int32 * max(1, len(attrs)))(*[_ATTR_CODES[a["type"]] for a in attrs])
    variadic = _variadic(schema)
    rc = lib.opd_torch_kernel(NAMESPACE.encode(), name.encode(),
                              form | (VARIADIC if variadic else 0),
                              len(schema["inputs"]), 0 if variadic else
                              schema["min_inputs"], len(schema["outputs"]),
                              len(attrs), names, types)
    tname = name + _SUFFIX[form]
    if rc == 0:
        _ckernels[tname] = 1
    else:                               # its CUDA calls raise, saying why
        msg = lib.opd_last_error()
        _cstate.setdefault("failed", {})[tname] = (
            msg.decode(errors="replace") if msg else str(rc))


def c_kernels():
    """The torch names whose CUDA kernel is libopd's C one (a form whose
    registration failed refuses CUDA tensors: c_kernels_failed() says
    why)."""
    return sorted(_ckernels)


def cpu_kernels(on=True):
    """Turns libopd's C kernel for torch's CPU dispatch key on (or off):
    torch.ops.opd.* on CPU tensors that all lie in opd's shared memory
    (empty, zeros, clone, earlier outputs, share_memory_() storages once
    registered) then run with no Python in the call; any other call still
    runs the Python kernel (staging, counted), but its errors, like the C
    kernel's, reach the caller as RuntimeError("opd: ...") rather than
    OpdError (_torchcpu.py says why). Needs torch >= 2.11 and a libopd
    built with TORCH=1; raises BackendError naming what is missing."""
    from . import _torchcpu
    why = _torchcpu.switch(_c_lib(), NAMESPACE, on, _runners, _bound, _cstate)
    if why:
        raise errors.error(protocol.EBACKEND, "opd.torch.cpu_kernels: " + why)


def c_kernels_failed():
    """{torch name: why} of the forms whose C kernel torch refused."""
    return dict(_cstate.get("failed", {}))


def client():
    """The Client the registered ops run on (connecting to $OPD_SOCKET's
    daemon on first use)."""
    global _client
    with _lock:
        if _client is None or _client.closed:
            _client = connect()
            _c_bind(_client)
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
        _c_bind(c)
        _infer_cache.clear()
        for r in _runners.values():
            r.clear()
        new = []
        schemas = c.ops()
        _daemon_names.update(schemas)
        for name, schema in schemas.items():
            if name in _ops:
                continue
            for n, op in _make(name, schema).items():
                _ops[n] = (op, schema)
                new.append(n)
        return new


class batch:
    """A batch of torch.ops.opd calls on CUDA tensors (opd_batch_begin in
    include/opd/opd.h, docs/async.md): inside `with opd.torch.batch():`
    the calls on the current stream (or on `stream`, a torch.cuda.Stream,
    where it is torch's current stream for the calls: `with
    torch.cuda.stream(s)`) are
    ordered with each other on the daemon's GPU stream only; the first
    waits for the work torch queued before it, and torch's work after the
    block waits for all of them, but nothing in between crosses over. For
    a chain of opd ops with nothing of torch's between them: each call
    then costs a frame to the daemon and one launch there, not a hand-off
    through torch's stream each way. Torch's own work on the stream inside
    the block is NOT ordered with the batch's calls: it must not read or
    write their tensors (the calls keep their own tensors alive until the
    block ends). Calls that need torch's work around them (a non-contiguous
    tensor) and the first call of a signature are ordered as outside the
    block; where libopd's C kernels are not available (c_kernels_why())
    the block changes nothing.
    One batch per connection at a time; blocks do not nest."""

    def __init__(self, stream=None):
        self._stream = stream
        self._c = None

    def __enter__(self):
        lib = _c_lib()
        if (lib is None or getattr(lib, "opd_batch_begin", None) is None or
                not _torch.cuda.is_available()):
            return self                 # ordered as outside: nothing to do
        c = _bound()
        s = self._stream if self._stream is not None else _torch.cuda.current_stream()
        errors.check(lib.opd_batch_begin(c._handle(), ctypes.c_void_p(s.cuda_stream)))
        self._c = c
        return self

    def __exit__(self, *exc):
        c, self._c = self._c, None
        if c is not None and not c.closed:
            rc = _c_lib().opd_batch_end(c._handle())
            if exc[0] is None:
                errors.check(rc)
        return False


def _size(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list, _torch.Size)):
        size = size[0]
    return tuple(int(d) for d in size)


def empty(*size, dtype=None):
    """A torch CPU tensor of `size` (ints or one sequence) and `dtype`
    (default torch.get_default_dtype()) in the shared memory of the client
    the ops run on (a block of its host Allocator, freed when the last view
    dies): torch.ops.opd calls read and write it in place, no copy.
    Uninitialised, as torch.empty."""
    dt = dtype if dtype is not None else _torch.get_default_dtype()
    return _torchops.host_view(_bound().empty(_size(size), dtype_name(dt)))


def zeros(*size, dtype=None):
    """empty(), filled with zeros."""
    return empty(*size, dtype=dtype).zero_()


def empty_like(t, dtype=None):
    """empty() of t's shape and dtype (or `dtype`)."""
    return empty(tuple(t.shape), dtype=dtype if dtype is not None else t.dtype)


def clone(t):
    """A copy of CPU tensor t in opd's shared memory (empty_like, then
    copy_): pay the copy once, then every call reads it in place."""
    return empty_like(t).copy_(t)


def staging():
    """(copies, bytes): the CPU tensors this process's torch.ops.opd calls
    and from_torch had to copy into shared memory (staging) on the bound
    client's connection; the daemon's STATS "staging" sums every
    client's."""
    st = _bound()._arenas.staged
    return st[0], st[1]


def flush_staging():
    """Sends the daemon the staging counts not sent yet (else: 50 ms)."""
    _bound()._arenas.flush_staging()


def ops():
    """{name: torch op} of the registered ops (torch.ops.opd.<name>)."""
    return {n: getattr(getattr(_torch.ops, NAMESPACE), n) for n in _ops}


try:
    register()
except errors.OpdError:
    pass  # no daemon at the default socket: call opd.torch.register(...)

# torch.compile(model, backend="opd"), on the client the ops run on
from . import dynamo  # noqa: E402
from .dynamo import attach_module, publish_module  # noqa: E402,F401

dynamo.register(client)
