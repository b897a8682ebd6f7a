#!/usr/bin/env python3
"""The tree's shape: no file calls into one that calls back, no file too long.

Objects: reads the symbols each object file defines and uses (nm), draws
an arrow A -> B when A uses a symbol B defines, and fails listing every
cycle (a strongly connected set of files) with the symbols behind its
arrows. Callbacks through function pointers (job->done, s->cb, the loop's
watchers, libopd's CUDA hook) are not arrows: they name no symbol of the
callee's file, which is the point of them. make test runs it twice, once
over the objects linked into build/opd (daemon, kernels, common) and once
over libopd's (client, common), so that an arrow between folders counts
as well as one inside a folder.

Sizes: every source file (.c .h .cu .cuh .py .sh) that git tracks under
the given folders has at most MAX lines; one concern per file keeps them
short (shared/style.md).

Usage: no_cycles.py --self-test  (two objects that call each other must
       be found, one that calls the other must not; a file one line over
       the bound must be found)
       no_cycles.py OBJ_DIR | FILE.o...   (make test passes the objects
         of the build, so that stale objects of removed files do not count)
       no_cycles.py --max-lines MAX FOLDER...
"""
import os
import subprocess
import sys


def symbols(path):
    out = subprocess.run(["nm", "--defined-only", "-g", path], check=True,
                         capture_output=True, text=True).stdout
    defined = {l.split()[-1] for l in out.splitlines() if l.strip()}
    out = subprocess.run(["nm", "--undefined-only", path], check=True,
                         capture_output=True, text=True).stdout
    used = {l.split()[-1] for l in out.splitlines() if l.strip()}
    return defined, used


def sccs(nodes, edges):
    """Tarjan's algorithm: the strongly connected components."""
    index, low, on, stack, out, n = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def self_test():
    import contextlib
    import io
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        src = {"a": "int b(void); int a(void) { return b(); }",
               "b": "int a(void); int b(void) { return %s; }"}
        results = []
        for back in ("a()", "1"):
            objs = []
            for name, text in src.items():
                c = os.path.join(d, "obj", "daemon", name + ".c")
                os.makedirs(os.path.dirname(c), exist_ok=True)
                with open(c, "w") as f:
                    f.write(text % back if "%s" in text else text)
                o = c[:-2] + ".o"
                subprocess.run(["cc", "-c", c, "-o", o], check=True)
                objs.append(o)
            sys.argv = [sys.argv[0]] + objs
            with contextlib.redirect_stdout(io.StringIO()):
                results.append(main())
        sizes = []
        for n in (3, 4):
            f = os.path.join(d, "long.c")
            with open(f, "w") as fh:
                fh.write("\n" * n)
            with contextlib.redirect_stdout(io.StringIO()):
                sizes.append(check_sizes(3, [f]))
    ok = results == [1, 0] and sizes == [0, 1]
    print("no_cycles self-test: %s (a cycle: exit %d, none: exit %d; "
          "3 lines of 3: exit %d, 4 of 3: exit %d)"
          % ("ok" if ok else "FAILED", results[0], results[1], sizes[0], sizes[1]))
    return 0 if ok else 1


SOURCE_EXT = (".c", ".h", ".cu", ".cuh", ".py", ".sh")


def check_sizes(max_lines, paths):
    """Exit status 1 listing each source file over max_lines, else 0.
    A folder means the files git tracks in it (all files if not in git)."""
    files = []
    for p in paths:
        if os.path.isdir(p):
            out = subprocess.run(["git", "ls-files", "--", p],
                                 capture_output=True, text=True)
            listed = out.stdout.split() if out.returncode == 0 else []
            if not listed:
                for dirpath, _, names in os.walk(p):
                    listed += [os.path.join(dirpath, n) for n in names]
            files += [f for f in listed if f.endswith(SOURCE_EXT)]
        else:
            files.append(p)
    over = []
    for f in sorted(set(files)):
        with open(f, "rb") as fh:
            n = fh.read().count(b"\n")
        if n > max_lines:
            over.append((n, f))
    for n, f in sorted(over, reverse=True):
        print("no_cycles: %s has %d lines (at most %d: split it by concern)"
              % (f, n, max_lines))
    if not over:
        print("no_cycles: %d source files, none over %d lines"
              % (len(set(files)), max_lines))
    return 1 if over else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if sys.argv[1:2] == ["--max-lines"]:
        return check_sizes(int(sys.argv[2]), sys.argv[3:])
    args = sys.argv[1:] or ["build/obj/daemon"]
    paths = []
    if len(args) == 1 and os.path.isdir(args[0]):
        for dirpath, _, files in os.walk(args[0]):
            paths += [os.path.join(dirpath, f) for f in files if f.endswith(".o")]
    else:
        paths = args
    objs = {}
    for p in paths:  # build/obj/daemon/x.o -> daemon/x.c
        name = p[p.rindex("obj/") + 4:] if "obj/" in p else p
        objs[name[:-2] + ".c"] = symbols(p)
    if not objs:
        print("no_cycles: no object files in %s (build first)" % " ".join(args))
        return 2
    owner = {}
    for name, (defined, _) in objs.items():
        for sym in defined:
            owner[sym] = name
    edges, why = {}, {}
    for name, (_, used) in objs.items():
        for sym in used:
            dst = owner.get(sym)
            if dst is None or dst == name:
                continue
            edges.setdefault(name, set()).add(dst)
            why.setdefault((name, dst), []).append(sym)
    bad = [c for c in sccs(objs.keys(), edges) if len(c) > 1]
    n_edges = sum(len(v) for v in edges.values())
    if not bad:
        print("no_cycles: %d files, %d arrows between them, no cycle"
              % (len(objs), n_edges))
        return 0
    for comp in bad:
        print("no_cycles: these files call each other in a cycle: %s"
              % ", ".join(comp))
        for a in comp:
            for b in sorted(edges.get(a, ())):
                if b in comp:
                    print("  %s -> %s: %s"
                          % (a, b, ", ".join(sorted(why[(a, b)]))))
    return 1


if __name__ == "__main__":
    sys.exit(main())
