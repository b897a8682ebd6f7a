"""_torchbench: what bench_models.py and bench_chain.py share: the checks
that decide whether a run can happen (torch with CUDA, opd.torch, a daemon
with a CUDA device), the header, the timing loop and the error figures.

DESIGN
Each program imports this module (it sits beside them, so the script's own
directory on sys.path finds it) before opd: require_cuda_torch() runs
first and ends the program with exit 0 and one "skipped" line when the
machine cannot run it (no torch, no CUDA, torch too old for opd.torch),
so CI and CPU machines pass through. connect() puts the repository's
python/ directory first on sys.path (the package of this checkout, as
bench_gpu.py does), points $OPD_SOCKET at --socket before `import
opd.torch` (which registers the ops of that daemon) and ends the program
with exit 1 and a message naming the socket when no daemon answers there,
when it has no CUDA device or lacks an op the program needs: those are
set-up mistakes, not machines to skip.

measure() is the timing method of both programs: after a warm-up, R
rounds; in each round each variant runs K times back to back and the
round's time is taken with one torch.cuda.synchronize() at its end (so
work that opd enqueues without waiting is counted when the GPU has done
it, not when the call returned); the variants alternate their order from
round to round so that a shared machine's drift lands on all of them.
"""
import datetime
import json
import os
import shlex
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_PYTHON = os.path.join(os.path.dirname(HERE), "python")


def skip(prog, why):
    """Prints '<prog>: skipped: <why>' and exits 0."""
    print("%s: skipped: %s" % (prog, why), flush=True)
    sys.exit(0)


def fail(prog, why):
    """Prints '<prog>: error: <why>' on stderr and exits 1."""
    print("%s: error: %s" % (prog, why), file=sys.stderr, flush=True)
    sys.exit(1)


def require_cuda_torch(prog):
    """Returns the torch module when torch is installed and sees a CUDA
    device; otherwise skips the program (exit 0)."""
    try:
        import torch
    except ImportError as e:
        skip(prog, "torch is not installed (%s)" % e)
    if not torch.cuda.is_available():
        skip(prog, "torch %s has no CUDA device (this benchmark needs a GPU)"
             % torch.__version__)
    return torch


def command_line():
    return " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv)


def connect(prog, socket, need_ops):
    """Imports opd and opd.torch from this checkout's python/, registered
    with the daemon at `socket` (None: $OPD_SOCKET or libopd's default).
    Returns (opd module, Client). Skips (exit 0) when opd.torch cannot be
    used with this torch; exits 1 when no daemon answers, it has no CUDA
    device or an op of need_ops is missing."""
    if REPO_PYTHON not in sys.path:
        sys.path.insert(0, REPO_PYTHON)
    if socket:
        os.environ["OPD_SOCKET"] = socket
    try:
        import opd
    except Exception as e:  # noqa: BLE001 (libopd missing, a broken build...)
        fail(prog, "cannot import the opd package from %s: %s: %s (set OPD_LIB "
             "to build/libopd.so)" % (REPO_PYTHON, type(e).__name__, e))
    try:
        import opd.torch
    except ImportError as e:
        skip(prog, "opd.torch cannot be used here: %s" % e)
    where = socket or os.environ.get("OPD_SOCKET") or "libopd's default socket"
    try:
        if not opd.torch.ops():
            opd.torch.register()     # the import found no daemon: say why
        c = opd.torch.client()
        devices = c.devices()
        have = set(opd.torch.ops())
    except opd.OpdError as e:
        fail(prog, "no opd daemon answers at %s: %s" % (where, e))
    if not devices:
        fail(prog, "the opd daemon at %s has no CUDA device (was it built with "
             "CUDA=1?); its devices: %r" % (where, devices))
    missing = [n for n in need_ops if n not in have]
    if missing:
        fail(prog, "the opd daemon at %s lacks the op(s) %s (torch.ops.opd has: %s)"
             % (where, ", ".join(missing), ", ".join(sorted(have))))
    return opd, c


def header(prog, torch, opd, c, extra=()):
    """Prints the '#' header lines: command, date, versions, GPU, whether
    opd's runs on torch tensors are stream-ordered, and `extra`."""
    info = c.server_info()
    print("# %s: %s" % (prog, datetime.datetime.now(datetime.timezone.utc)
                        .strftime("%Y-%m-%dT%H:%M:%SZ")))
    print("# command: %s" % command_line())
    print("# torch %s, cuda %s, gpu %s" % (torch.__version__, torch.version.cuda,
                                          torch.cuda.get_device_name()))
    lib = getattr(c, "_lib", None)
    ordered = lib is not None and getattr(lib, "opd_run_stream", None) is not None
    print("# opd daemon %s at %s, devices %s; runs on torch CUDA tensors %s"
          % (info.get("version"), c.socket, c.devices(),
             "ordered with torch's stream (libopd opd_run_stream)" if ordered else
             "synchronous (this libopd has no opd_run_stream; torch synchronized "
             "before each)"))
    try:
        import opd.torch as ot
        why = ot.c_kernels_why()
        print("# torch.ops.opd on CUDA tensors: %s" % (
            "libopd's C kernels (%d registered)" % len(ot.c_kernels())
            if not why else "refused: no C kernels (%s)" % why))
    except ImportError:
        pass
    for line in extra:
        print("# " + line)
    sys.stdout.flush()


def set_tf32(torch, on):
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def tf32_str(torch):
    return "matmul.allow_tf32=%s cudnn.allow_tf32=%s" % (
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)


LEGACY_MODES = ("direct", "side", "fork", "busy", "word", "kernel", "pdl")


def legacy_setter():
    """set(mode) for libopd's opd__stream_legacy in this process (the
    library torch.ops.opd loaded: $OPD_LIB, a `make BENCH=1` build): where
    libopd's part of a call on torch's default stream goes (docs/async.md);
    set(None) returns the mode now. RuntimeError if the library is not a
    bench build."""
    import ctypes
    lib = ctypes.CDLL(os.environ.get("OPD_LIB", "libopd.so.0"))
    f = getattr(lib, "opd__stream_legacy", None)
    if f is None:   # exported by a bench build only
        raise RuntimeError("libopd (%s) has no opd__stream_legacy: build it "
                           "with `make BENCH=1`" % os.environ.get("OPD_LIB", "libopd.so.0"))
    f.argtypes = [ctypes.c_char_p]
    f.restype = ctypes.c_int

    def set_legacy(mode):
        if mode is None:
            return LEGACY_MODES[f(None)]
        if f(mode.encode()) != 0:
            raise RuntimeError("opd__stream_legacy(%r) failed" % mode)
        return mode
    return set_legacy


def add_legacy_arg(ap, what):
    """--legacy MODES: `what` timed again per mode in the same rounds
    (bench_models.py, bench_chain.py)."""
    ap.add_argument("--legacy", default="", metavar="MODES",
                    help="also time %s with libopd's part of each call on torch's "
                    "default stream placed as each of these says (comma-separated: "
                    "%s; OPD_STREAM_LEGACY, docs/async.md), in the same rounds"
                    % (what, ",".join(LEGACY_MODES)))


def legacy_modes(ap, value):
    """--legacy's value as a list of modes; an unknown one is ap.error."""
    modes = [m for m in value.split(",") if m]
    bad = [m for m in modes if m not in LEGACY_MODES]
    if bad:
        ap.error("--legacy: unknown %s; choose from %s"
                 % (",".join(bad), ",".join(LEGACY_MODES)))
    return modes


def in_mode(set_legacy, mode, fn):
    """fn, run with libopd's legacy-stream mode set to `mode` first."""
    return lambda: (set_legacy(mode), fn())


def measure(torch, variants, rounds, iters, warmup):
    """variants: [(name, fn)]; fn() runs once (its result is dropped).
    Returns {name: [ms per run, one per round]}: per round, iters runs back
    to back and one torch.cuda.synchronize() at the end, the variants'
    order reversed every other round."""
    for _, fn in variants:
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    per = {name: [] for name, _ in variants}
    for r in range(rounds):
        order = variants if r % 2 == 0 else variants[::-1]
        for name, fn in order:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            t1 = time.perf_counter()   # all queued: the host's part
            torch.cuda.synchronize()
            per[name].append((time.perf_counter() - t0) * 1e3 / iters)
            per.setdefault(name + "@host", []).append((t1 - t0) * 1e3 / iters)
    return per


def per_call(fn, n):
    """The best of 3 rounds of n calls of fn(), in us per call (after one
    call to warm it)."""
    fn()
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = (time.perf_counter() - t0) / n * 1e6
        best = dt if best is None else min(best, dt)
    return best


def median(v):
    return statistics.median(v)


def errors(torch, got, want):
    """(max abs diff, that over max |want|, has a non-finite value) of two
    tensors of one shape, compared in float64."""
    if tuple(got.shape) != tuple(want.shape):
        raise ValueError("shapes differ: %s against torch's %s"
                         % (tuple(got.shape), tuple(want.shape)))
    g, w = got.double(), want.double()
    bad = not bool(torch.isfinite(g).all())
    d = float((g - w).abs().max()) if g.numel() else 0.0
    ref = float(w.abs().max()) if w.numel() else 0.0
    return d, (d / ref if ref > 0 else d), bad


def write_json(prog, path, doc):
    try:
        with open(path, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
    except OSError as e:
        fail(prog, "cannot write --json %s: %s" % (path, e))
    print("# figures written to %s" % path)
