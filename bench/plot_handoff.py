#!/usr/bin/python3
"""plot_handoff.py: before/after pairs of `handoff` lines as a PNG.

    /usr/bin/python3 bench/plot_handoff.py bench/results/FILE.txt [OUT.png]

Reads lines `handoff step=S case=C unit=us|ratio before=a,b after=c,d
torch=lo,hi` (bench/results/2026-12-08-vm-cpu-handoff.txt) and draws one
panel per unit: per case, the before runs (grey) and after runs (blue) as
dots over bars at their means, on a log axis, with torch's range (us) or
parity (ratio) as a dashed mark. OUT defaults to FILE with .png. Needs
Debian's python3-matplotlib.
"""
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(src):
    """{unit: [(label, before[], after[], torch[])]} in file order."""
    out = {}
    for line in open(src):
        if not line.startswith("handoff "):
            continue
        kv = dict(p.split("=", 1) for p in line.split()[1:])
        vals = [[float(v) for v in kv[k].split(",")] for k in ("before", "after", "torch")]
        out.setdefault(kv["unit"], []).append(("%s\n(%s)" % (kv["case"], kv["step"]), *vals))
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    src = sys.argv[1]
    dst = sys.argv[2] if len(sys.argv) > 2 else src.rsplit(".", 1)[0] + ".png"
    data = read(src)
    if not data:
        sys.exit("plot_handoff: no handoff lines in %s" % src)
    fig, axes = plt.subplots(len(data), 1, figsize=(11, 4.5 * len(data)), squeeze=False)
    for ax, (unit, rows) in zip(axes[:, 0], data.items()):
        for i, (label, before, after, torch) in enumerate(rows):
            for x, vals, color in ((i - 0.18, before, "0.6"), (i + 0.18, after, "tab:blue")):
                ax.bar(x, sum(vals) / len(vals), width=0.34, color=color, alpha=0.5)
                ax.plot([x] * len(vals), vals, "o", color=color, ms=4)
            ax.hlines(torch, i - 0.4, i + 0.4, colors="tab:red", linestyles="dashed", lw=1)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([r[0] for r in rows], fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("call, us" if unit == "us" else "p50 / torch eager")
        ax.set_title("%s: before (grey) and after (blue) each step; red: torch %s" %
                     ("per-call time" if unit == "us" else "the MLP against torch",
                      "in-process, same runs" if unit == "us" else "(parity)"), fontsize=9)
    fig.suptitle("opd CPU backend on the 2-vCPU VM: thread hand-offs removed (%s)" % src.rsplit("/", 1)[-1],
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)
    print("plot_handoff: wrote %s" % dst)


if __name__ == "__main__":
    main()
