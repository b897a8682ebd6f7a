#!/usr/bin/env python3
"""plot_compare_trees.py: a compare_trees.sh run as a PNG.

Reads the output of bench/compare_trees.sh (its raw lines, `old: ...` and
`new: ...`), takes each transport's ratio_p50 (opd's p50 over its own
round's raw ping-pong) per round and tree, and draws them side by side, one
group per transport, the rounds as dots over the median's bar: a figure
people compare at a glance, beside the results file it came from.

Usage: python3 bench/plot_compare_trees.py RESULTS.txt OUT.png [TITLE]
Needs matplotlib (Debian: python3-matplotlib).
"""
import re
import statistics
import sys


def ratios(path):
    """{(transport, tree): [ratio_p50 per round]} of bench_pingpong's lines."""
    out = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"(old|new): latency transport=(\w+) p50_ns=\d+ .*ratio_p50=([0-9.]+)", line)
            if m and "api=" not in line and "case=" not in line:
                out.setdefault((m.group(2), m.group(1)), []).append(float(m.group(3)))
    return out


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    r = ratios(sys.argv[1])
    transports = [t for t in ("spin", "adaptive", "socket") if (t, "old") in r and (t, "new") in r]
    if not transports:
        print("plot_compare_trees: no bench_pingpong ratios in %s" % sys.argv[1])
        return 1
    fig, ax = plt.subplots(figsize=(6, 3.4), dpi=120)
    for i, t in enumerate(transports):
        for j, (tree, color) in enumerate((("old", "#999999"), ("new", "#1f77b4"))):
            vals = r[(t, tree)]
            x = i + (j - 0.5) * 0.36
            ax.bar(x, statistics.median(vals), width=0.34, color=color,
                   label=("before" if tree == "old" else "after") if i == 0 else None)
            ax.plot([x] * len(vals), vals, "k.", markersize=4)
    ax.set_xticks(range(len(transports)))
    ax.set_xticklabels(transports)
    ax.set_ylabel("opd p50 / raw ping-pong p50")
    ax.set_title(sys.argv[3] if len(sys.argv) > 3 else sys.argv[1], fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2])
    print("plot_compare_trees: %s" % sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
