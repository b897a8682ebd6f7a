#!/usr/bin/python3
"""plot_graph.py: bench_graph's results as a PNG beside the text.

    /usr/bin/python3 bench/plot_graph.py bench/results/FILE.txt [OUT.png]

Reads the `graph lang=... device=... batch=... case=... p50_us=...
p99_us=...` lines of bench/bench_graph.py (the first run of each case in
the file; C cases after a `transport=spin` header apart) and draws, per batch size, the p50 of every case as a bar with
its p99 as a tick: the opd graph (C prepared, C on device tensors,
Python), the same ops one by one, and torch (eager, CUDA-graph replay).
Needs Debian's python3-matplotlib.
"""
import re
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ORDER = [("c", "graph_prepared", "opd graph (C)"), ("c", "graph_dev", "opd graph, device tensors (C)"),
         ("c-spin", "graph_prepared", "opd graph (C, spin)"),
         ("c-spin", "graph_dev", "opd graph, device tensors (C, spin)"),
         ("python", "graph", "opd graph (Python)"), ("c", "ops_prepared", "opd op by op (C)"),
         ("python", "ops", "opd op by op (Python)"), ("torch", "eager", "torch eager"),
         ("torch", "graph", "torch CUDA graph replay"), ("torch", "graph_io", "torch replay + host copies")]


def main():
    src = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else re.sub(r"\.txt$", ".png", src)
    seen, title, spin = {}, "", False
    for line in open(src):
        if line.startswith("## "):   # a new section: its transport unknown
            spin = False
        if line.startswith("# bench_graph:"):
            spin = "transport=spin" in line
        if line.startswith("# card:") or line.startswith("# machine:"):
            title = title or line[2:].strip()
        if not line.startswith("graph "):
            continue
        kv = dict(p.split("=", 1) for p in line.split()[1:] if "=" in p)
        lang = kv["lang"] + ("-spin" if spin and kv["lang"] == "c" else "")
        key = (kv["device"], int(kv["batch"]), lang, kv["case"])
        seen.setdefault(key, (float(kv["p50_us"]), float(kv["p99_us"])))
    panels = sorted({(d, b) for d, b, _, _ in seen})
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    for ax, (dev, batch) in zip(axes[0], panels):
        rows = [(label, seen[(dev, batch, lang, case)]) for lang, case, label in ORDER
                if (dev, batch, lang, case) in seen]
        ys = range(len(rows))
        ax.barh(list(ys), [r[1][0] for r in rows], color="#4c72b0")
        ax.scatter([r[1][1] for r in rows], list(ys), marker="|", color="black", s=200,
                   label="p99")
        ax.set_yticks(list(ys))
        ax.set_yticklabels([r[0] for r in rows])
        ax.invert_yaxis()
        ax.set_xlabel("µs per request (bar: p50)")
        ax.set_title("MLP 256-512-512-1 fp32, %s, batch %d" % (dev, batch))
        ax.legend(loc="lower right")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(out)


if __name__ == "__main__":
    main()
