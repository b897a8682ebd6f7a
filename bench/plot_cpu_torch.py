#!/usr/bin/python3
"""plot_cpu_torch.py: bench_cpu_torch's results as a PNG beside the text.

    /usr/bin/python3 bench/plot_cpu_torch.py bench/results/FILE.txt [OUT.png]

Reads the `cpu op=... shape=... opd_us=... torch_us=... ratio=...` lines
of bench/bench_cpu_torch.py. A file may hold several runs of the bench
and several sections (a line starting with `## ` opens one, its text the
panel's title: e.g. one section with 2 threads on each side, one with 1).
Per section, one panel: for each op and shape, a bar at the median ratio
opd / torch over the section's runs and a dot per run (the spread), on a
log axis; a red tick at the op's target from issue 41 (gelu, conv2d and
matmul <= 1.0, softmax <= 0.8) and a dashed line at parity; for matmul
also opd / numpy per run (blue diamonds: the issue's bar for matmul is
OpenBLAS through numpy). Below 1 opd is faster. Needs Debian's python3-matplotlib.
"""
import re
import statistics
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TARGETS = {"gelu": 1.0, "conv2d": 1.0, "matmul": 1.0, "softmax": 0.8}
OPS = ("relu", "add", "gelu", "gelu_tanh", "softmax", "layernorm", "matmul", "conv2d")


def read(src):
    """[(section title, {(op, shape): [ratio, ...]}, {(op, shape):
    [ratio_numpy, ...]})] in file order, and the file's first `# machine:`
    line."""
    sections, machine = [], ""
    for line in open(src):
        if line.startswith("# machine:"):
            machine = machine or line[2:].strip()
        if line.startswith("## "):
            sections.append((line[3:].strip(), {}, {}))
        if not line.startswith("cpu "):
            continue
        if not sections:
            sections.append(("", {}, {}))
        kv = dict(p.split("=", 1) for p in line.split()[1:] if "=" in p)
        key = (kv["op"], kv["shape"])
        sections[-1][1].setdefault(key, []).append(float(kv["ratio"]))
        if "ratio_numpy" in kv:
            sections[-1][2].setdefault(key, []).append(float(kv["ratio_numpy"]))
    return [s for s in sections if s[1]], machine


def numel(shape):
    """Elements of a shape text such as 256x1024 or 1x64x56x56,k64 (to
    order the shapes of an op small to large)."""
    n = 1
    for d in re.findall(r"\d+", shape.split(",")[0]):
        n *= int(d)
    return n


def main():
    src = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else re.sub(r"\.txt$", ".png", src)
    sections, machine = read(src)
    if not sections:
        sys.exit("%s: no `cpu op=...` lines" % src)
    fig, axes = plt.subplots(len(sections), 1, figsize=(13, 4.6 * len(sections)),
                             squeeze=False)
    for ax, (title, ratios, vs_numpy) in zip(axes[:, 0], sections):
        keys = sorted(ratios, key=lambda k: (OPS.index(k[0]) if k[0] in OPS else len(OPS),
                                             k[0], numel(k[1])))
        xs = range(len(keys))
        med = [statistics.median(ratios[k]) for k in keys]
        colors = ["#55a868" if k[0] in TARGETS and m <= TARGETS[k[0]] else
                  "#c44e52" if k[0] in TARGETS else "#8c8c8c" for k, m in zip(keys, med)]
        ax.bar(list(xs), med, color=colors, width=0.7)
        for x, k in zip(xs, keys):
            ax.scatter([x] * len(ratios[k]), ratios[k], color="black", s=10, zorder=3)
            if k in vs_numpy:
                ax.scatter([x + 0.2] * len(vs_numpy[k]), vs_numpy[k], marker="D",
                           facecolors="none", edgecolors="#4c72b0", s=22, zorder=3,
                           label="opd / numpy (OpenBLAS)" if k == min(vs_numpy) else None)
            if k[0] in TARGETS:
                ax.hlines(TARGETS[k[0]], x - 0.4, x + 0.4, color="red", linewidth=2, zorder=4)
        ax.axhline(1.0, color="gray", linestyle="--", linewidth=1)
        if vs_numpy:
            ax.legend(loc="upper right", fontsize=8)
        ax.set_yscale("log")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(["%s\n%s" % k for k in keys], rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("opd / torch time (median of runs)")
        runs = max(len(v) for v in ratios.values())
        ax.set_title("%s (%d run%s; dots: each run; red ticks: issue 41's targets; "
                     "green: target met)" % (title or "opd CPU vs torch CPU", runs,
                                             "s" if runs > 1 else ""), fontsize=9)
    fig.suptitle(machine if len(machine) <= 160 else machine[:157] + "...", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    fig.savefig(out, dpi=100)
    print(out)


if __name__ == "__main__":
    main()
