#!/usr/bin/env python3
"""No module of a Python package imports one that imports it back.

Reads every .py file of a package directory (default python/opd) with
ast, draws an arrow A -> B for each relative import of a module of the
package (`from . import b`, `from .b import name`, `from .. import b`
inside a subpackage), at module level and inside functions alike (a
lazy import is still a dependency: it only moves the cycle to run time),
and fails listing every cycle (a strongly connected set of modules) with
the lines behind its arrows. The package's __init__ is a module like the
others: importing a submodule runs it first, but that is not an arrow.

Usage: py_imports.py --self-test  (a pair of modules that import each
       other, one directly and one lazily, must be found; a chain must not)
       py_imports.py [--module-level] [PACKAGE_DIR]
         --module-level  count only imports at module level
Standard library only. Exit 0: no cycle; 1: cycles (listed); 2: usage.
"""
import ast
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from no_cycles import sccs  # noqa: E402 (Tarjan's algorithm, one copy)


def modules(pkg):
    """{module name relative to pkg ("client", "sub.x", "__init__"): path}"""
    out = {}
    for root, dirs, files in os.walk(pkg):
        dirs[:] = sorted(d for d in dirs if os.path.exists(
            os.path.join(root, d, "__init__.py")))
        rel = os.path.relpath(root, pkg)
        prefix = "" if rel == "." else rel.replace(os.sep, ".") + "."
        for f in sorted(files):
            if f.endswith(".py"):
                out[prefix + f[:-3]] = os.path.join(root, f)
    return out


def _package_of(mod):
    """The package a module's relative imports start from ("" top)."""
    parts = mod.split(".")
    return parts[:-1]


def arrows(mods, module_level=False):
    """{(a, b): [line numbers]} of module a importing module b."""
    out = {}
    for mod, path in mods.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        nodes = tree.body if module_level else ast.walk(tree)
        for node in nodes:
            if not isinstance(node, ast.ImportFrom) or node.level == 0:
                continue
            base = _package_of(mod)
            if node.level > 1:
                base = base[:len(base) - (node.level - 1)]
            names = []
            if node.module:
                target = ".".join(base + node.module.split("."))
                names.append(target)
                for a in node.names:          # from .sub import module
                    names.append(target + "." + a.name)
            else:
                for a in node.names:          # from . import module
                    names.append(".".join(base + [a.name]))
            for t in names:
                if t in mods and t != mod:
                    out.setdefault((mod, t), []).append(node.lineno)
    return out


def cycles(pkg, module_level=False):
    """[(modules of one cycle, [(a, b, lines)])] of package dir pkg."""
    mods = modules(pkg)
    arr = arrows(mods, module_level)
    edges = {}
    for a, b in arr:
        edges.setdefault(a, set()).add(b)
    found = []
    for comp in sccs(mods, edges):
        if len(comp) < 2:
            continue
        inside = set(comp)
        found.append((comp, [(a, b, arr[(a, b)]) for (a, b) in sorted(arr)
                             if a in inside and b in inside]))
    return found


def report(pkg, module_level=False):
    found = cycles(pkg, module_level)
    for comp, arrs in found:
        print("cycle: %s" % " ".join(comp))
        for a, b, lines in arrs:
            print("  %s -> %s  (%s.py line %s)" % (
                a, b, a.replace(".", "/"), ", ".join(map(str, lines))))
    n = len(modules(pkg))
    print("%s: %d modules, %d import cycle(s)" % (pkg, n, len(found)))
    return 1 if found else 0


def self_test():
    with tempfile.TemporaryDirectory() as d:
        def write(name, text):
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        write("__init__.py", "from . import a\nfrom .c import f\n")
        write("a.py", "from . import b\n")
        write("b.py", "def g():\n    from .a import x\n")   # lazily, back
        write("c.py", "from .d import y\nimport os\n")
        write("d.py", "from . import protocol_missing\n")
        found = cycles(d)
        ok = [c for c, _ in found] == [["a", "b"]]
        lazy_only = cycles(d, module_level=True)
        ok = ok and lazy_only == []
        os.remove(os.path.join(d, "b.py"))
        ok = ok and cycles(d) == []
    print("self-test: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    flags = [a for a in argv if a.startswith("--")]
    if "--self-test" in flags:
        return self_test()
    if set(flags) - {"--module-level"} or len(args) > 1:
        print(__doc__.split("\n\n")[-1], file=sys.stderr)
        return 2
    pkg = args[0] if args else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "opd")
    return report(os.path.normpath(pkg), "--module-level" in flags)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
