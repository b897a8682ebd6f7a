#!/usr/bin/env python3
"""The path of one CPU run, from Python to the kernel and back, file by file.

Starts a daemon of a TRACE=1 build (every C function's entry recorded by
tests/arch/ftrace.c) on a private socket, runs `c.softmax(x, out=y)` from
the Python package over that build's libopd a few times to warm up, then
once more inside a recorded time window (Python's own calls through
sys.setprofile), stops both, and prints the files each thread entered in
that window, in order, with consecutive entries of one file collapsed:

  python   client.py -> _runner.py -> ...
  libopd   run.c -> transport.c -> ...
  daemon   ringsvc.c -> session.c -> handlers.c -> ... (the loop thread)
  pool     kernels/... (a pool thread, where the run is not inline)

It fails when a thread enters a file while a call into that file is
still on its stack below a call into another file (A -> B -> A, a call
back through a function pointer included): the path visits each file
once, calls return to their caller. Each thread's stack is replayed from
its start, so the window sees true depths. Offsets are mapped to files with
addr2line (binutils); a header's inline function counts as its caller's.

Usage: request_path.py [BUILD_DIR]   (OPD_PATH_FUNCS=1: functions, not files)   (default build/trace; make trace
       builds it and runs this)
       request_path.py --self-test    (the collapsing and the check)
"""
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CLIENT = r'''
import json, os, sys, time
sys.path.insert(0, os.path.join(sys.argv[1], "python"))
import opd
pkg = os.path.join(sys.argv[1], "python", "opd") + os.sep
calls = []
def prof(frame, event, arg):
    if event == "call" and frame.f_code.co_filename.startswith(pkg):
        calls.append(frame.f_code.co_filename[len(pkg):])
# The daemon is ready once it answers (as tests/integration/harness.c
# waits): a connection refused or closed during its start-up is retried
# for up to 30 s, each failure printed, so a slow start is seen, not hidden.
deadline = time.monotonic() + 30
while True:
    try:
        c = opd.connect(sys.argv[2], wait=os.environ.get("OPD_WAIT"))
        break
    except opd.OpdError as e:
        if time.monotonic() > deadline:
            raise
        print("request_path: connect: %s; retrying" % e, file=sys.stderr)
        time.sleep(0.1)
with c:
    x = c.empty((8, 1024), dtype="float32")
    y = c.empty((8, 1024), dtype="float32")
    x.numpy()[:] = 1.0
    for _ in range(20):
        c.softmax(x, out=y)
    t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    sys.setprofile(prof)
    c.softmax(x, out=y)
    sys.setprofile(None)
    t1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    ok = abs(float(y.numpy().sum()) - 8.0) < 1e-3
with open(sys.argv[3], "w") as f:
    json.dump({"t0": t0, "t1": t1, "python": calls, "ok": ok,
               "pid": os.getpid()}, f)
'''


# Calls back that are the design, not a tangle (each a callback through a
# function pointer the caller was given, named in docs/architecture.md):
#   a transport hands a payload up to its session (s->cb->payload) and the
#   reply goes back down through it; the session pumps its transport's
#   frames, which come up the same way;
#   a finished run gives its session the turn (s->cb->ready), which starts
#   the session's next run;
#   the CPU pool's parallel-for runs the kernel's own loop body on each
#   thread, as qsort calls its comparator (opd_exec_t.parallel_for).
# A chain [X, Y, X] with (X, Y) here is not counted; any other re-entry is.
CALLBACK_OK = {
    ("daemon/sock.c", "daemon/session.c"), ("daemon/session.c", "daemon/sock.c"),
    ("daemon/ringsvc.c", "daemon/session.c"), ("daemon/session.c", "daemon/ringsvc.c"),
    ("daemon/run/jobs.c", "daemon/session.c"),
}
CALLBACK_OK_MIDDLE = {"kernels/runtime/exec.c"}


def allowed(chain):
    return (len(chain) == 3 and chain[0] == chain[2] and
            ((chain[0], chain[1]) in CALLBACK_OK or chain[1] in CALLBACK_OK_MIDDLE))


def first_seen(seq):
    """The items in the order each first appears."""
    out = []
    for x in seq:
        if x not in out:
            out.append(x)
    return out


def replay(events, window):
    """Replays one thread's calls: events are (ns, is_exit, file) in order,
    file None for a function of no file of the tree's .c files (a header's
    inline function is counted as its caller's). Returns (the files entered
    inside window, in order; the re-entries: a file entered while a call
    into it is still on the stack below a call into another file, as the
    chain of files from the first to the second)."""
    stack, entered, again = [], [], []
    t0, t1 = window
    for ns, is_exit, f in events:
        if is_exit:
            if stack:
                stack.pop()
            continue
        top = stack[-1] if stack else None
        f = f or top
        if t0 <= ns <= t1 and f is not None:
            entered.append(f)
            if f != top and f in stack:
                chain = stack[stack.index(f):] + [f]
                chain = [c for i, c in enumerate(chain) if i == 0 or chain[i - 1] != c]
                if chain not in again and not allowed(chain):
                    again.append(chain)
        stack.append(f)
    return entered, again


def self_test():
    ev = [(1, 0, "a.c"), (2, 0, "b.c"), (3, 1, None), (4, 0, "c.c"), (5, 1, None),
          (6, 1, None)]
    ok1 = replay(ev, (0, 9)) == (["a.c", "b.c", "c.c"], [])
    ev = [(1, 0, "a.c"), (2, 0, "b.c"), (3, 0, None), (4, 0, "a.c")]
    ok2 = replay(ev, (0, 9)) == (["a.c", "b.c", "b.c", "a.c"], [["a.c", "b.c", "a.c"]])
    ok3 = replay(ev, (0, 3))[1] == []
    ev = [(1, 0, "k.c"), (2, 0, "kernels/runtime/exec.c"), (3, 0, "k.c")]
    ok3 = ok3 and replay(ev, (0, 9))[1] == []
    ok = ok1 and ok2 and ok3 and first_seen(["a", "b", "a"]) == ["a", "b"]
    print("request_path self-test: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def read_trace(path):
    objs, recs = {}, []
    with open(path) as f:
        for line in f:
            p = line.split()
            if p[0] == "obj":
                objs[int(p[1])] = p[2]
            else:
                recs.append((int(p[0]), int(p[1]), p[2] == "<", int(p[3]),
                             int(p[4], 16)))
    return objs, recs


def files_of(obj, offsets):
    """offset -> source file relative to the tree (None for a header's
    inline function or a file outside the tree)."""
    offsets = sorted(set(offsets))
    if not offsets:
        return {}
    funcs = os.environ.get("OPD_PATH_FUNCS") == "1"
    out = subprocess.run(["addr2line", "-e", obj] + (["-f"] if funcs else []) +
                         ["%x" % o for o in offsets],
                         check=True, capture_output=True, text=True).stdout.split("\n")
    if funcs:   # function, then file:line, per address
        out = ["%s:%s" % (out[i + 1].rsplit(":", 1)[0], out[i]) for i in range(0, len(out) - 1, 2)]
    res = {}
    for o, line in zip(offsets, out):
        src = line if funcs else line.rsplit(":", 1)[0]
        src = os.path.normpath(src) if src and src != "??" else None
        if src and src.startswith(ROOT + os.sep):
            src = src[len(ROOT) + 1:]
        elif src and os.path.isabs(src):
            src = None
        if src and src.split(":")[0].endswith((".h", ".cuh")):
            src = None
        res[o] = src
    return res


def threads(trace, window):
    """[(tid, files entered in window, re-entries)] of the threads that
    entered a file of the tree inside the window."""
    objs, recs = read_trace(trace)
    by_obj = collections.defaultdict(list)
    for _, _, _, o, off in recs:
        by_obj[o].append(off)
    names = {o: files_of(objs[o], offs) for o, offs in by_obj.items() if o in objs}
    per = collections.OrderedDict()
    for ns, tid, is_exit, o, off in recs:
        per.setdefault(tid, []).append((ns, is_exit, names.get(o, {}).get(off)))
    out = []
    for tid, ev in per.items():
        entered, again = replay(ev, window)
        if entered:
            out.append((tid, entered, again))
    return out


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/trace")
    for f in ("opd", "libopd.so"):
        if not os.path.exists(os.path.join(build, f)):
            print("request_path: %s/%s missing (make trace builds it)" % (build, f))
            return 2
    tmp = tempfile.mkdtemp(prefix="opd-path.")
    sock = os.path.join(tmp, "opd.sock")
    env = dict(os.environ, OPD_TRACE=os.path.join(tmp, "trace"),
               OPD_LIB=os.path.join(build, "libopd.so"))
    daemon = subprocess.Popen([os.path.join(build, "opd"), "--socket", sock],
                              env=env, stdout=subprocess.DEVNULL,
                              stderr=open(os.path.join(tmp, "opd.log"), "w"))
    for _ in range(100):
        if os.path.exists(sock):
            break
        time.sleep(0.05)
    res = os.path.join(tmp, "client.json")
    rc = subprocess.run([sys.executable, "-c", CLIENT, ROOT, sock, res], env=env).returncode
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(timeout=30)
    if rc != 0:
        print("request_path: the client failed (exit %d); the daemon's log:" % rc)
        with open(os.path.join(tmp, "opd.log")) as f:
            sys.stdout.write(f.read()[-4000:])
        return 1
    with open(res) as f:
        r = json.load(f)
    if not r["ok"]:
        print("request_path: the traced softmax returned a wrong result")
        return 1
    window = (r["t0"], r["t1"])
    paths = [("python", first_seen(r["python"]), [])]
    for i, (_, seq, again) in enumerate(threads("%s.%d" % (env["OPD_TRACE"], r["pid"]), window)):
        paths.append(("libopd" if i == 0 else "libopd thread %d" % i, first_seen(seq), again))
    served = threads("%s.%d" % (env["OPD_TRACE"], daemon.pid), window)
    for i, (_, seq, again) in enumerate(served):
        paths.append(("daemon" if i == 0 else "daemon thread %d" % i, first_seen(seq), again))
    bad = 0
    for name, path, again in paths:
        print("%-16s %s" % (name, " -> ".join(path) if path else "(nothing)"))
        for chain in again:
            bad += 1
            print("%-16s re-entered: %s" % ("", " -> ".join(chain)))
    if not served:
        print("request_path: no daemon entries in the window (is %s a TRACE=1 build?)" % build)
        return 1
    print("request_path: %s" % ("no file re-entered from a file it called" if not bad else
                                "%d re-entries" % bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
