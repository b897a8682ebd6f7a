"""The documentation's references resolve: every relative link in README.md,
docs/ and bench/results/README.md, every tree path they name in backticks or
prose (bench/..., tests/..., examples/...), every raw results file they cite by
name, and every docs/*.md a source file's comment points to. A renamed or
moved file breaks a test here instead of a reader's link."""
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = ["README.md", "bench/results/README.md"] + sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")) +
    glob.glob(os.path.join(ROOT, "docs", "records", "*", "*.md")))

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# longer extensions first: "x.cu" must not be read as "x.c"
PATH = re.compile(r"(?<![\w/.-])((?:bench|docs|examples|tests|include/opd|packaging|"
                  r"kernels|daemon|client|common|python)/[\w./-]*?\."
                  r"(?:txt|md|patch|cuh|cu|c|h|py|sh|in|conf|json))(?![\w])")
RESULT = re.compile(r"`(20\d\d-\d\d-\d\d-[\w.-]+\.(?:txt|patch))`")


def _read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def _exists(doc, target):
    here = os.path.dirname(os.path.join(ROOT, doc))
    return (os.path.exists(os.path.join(here, target))
            or os.path.exists(os.path.join(ROOT, target)))


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_resolve(doc):
    missing = [t for t in LINK.findall(_read(doc))
               if not re.match(r"[a-z]+:", t) and not _exists(doc, t)]
    assert missing == [], "%s links to files that are not there: %s" % (doc, missing)


@pytest.mark.parametrize("doc", DOCS)
def test_named_tree_paths_exist(doc):
    missing = sorted({p for p in PATH.findall(_read(doc))
                      if "*" not in p and not _exists(doc, p)})
    assert missing == [], "%s names paths that are not in the tree: %s" % (doc, missing)


@pytest.mark.parametrize("doc", DOCS)
def test_cited_results_files_exist(doc):
    missing = sorted({r for r in RESULT.findall(_read(doc))
                      if not os.path.exists(os.path.join(ROOT, "bench", "results", r))})
    assert missing == [], "%s cites results files not in bench/results: %s" % (doc, missing)


def test_source_comments_point_at_existing_docs():
    ref = re.compile(r"docs/([\w-]+\.md)")
    missing = set()
    for pattern in ("daemon/**/*.[ch]", "client/**/*.[ch]", "common/**/*.[ch]",
                    "kernels/**/*.c*", "include/**/*.h", "python/**/*.py",
                    "bench/*.*", "tests/**/*.*", "examples/**/*.*", "Makefile"):
        for path in glob.glob(os.path.join(ROOT, pattern), recursive=True):
            if not os.path.isfile(path):
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                for name in ref.findall(f.read()):
                    if not os.path.exists(os.path.join(ROOT, "docs", name)):
                        missing.add("%s -> docs/%s" % (os.path.relpath(path, ROOT), name))
    assert sorted(missing) == []
