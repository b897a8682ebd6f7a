#!/usr/bin/python3
"""plot_compile.py: bench_compile's results as a PNG beside the text.

    /usr/bin/python3 bench/plot_compile.py bench/results/FILE.txt [OUT.png]

Reads the `# bench_compile: ... torch_threads=N` headers and the
`compile model=... shape=BxT eager_us=... opd_us=... ratio=...` lines of
bench/bench_compile.py and draws, per shape, torch eager's and the opd
graph's time as bars (one group per header: torch's thread count),
with the ratio written above the opd bar. Needs Debian's
python3-matplotlib.
"""
import re
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    src = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else re.sub(r"\.txt$", ".png", src)
    runs, head = [], None
    for line in open(src):
        m = re.match(r"# bench_compile: model=(\S+) .*device=(\S+) .*torch_threads=(\d+)", line)
        if m:
            head = {"model": m.group(1), "device": m.group(2), "threads": m.group(3), "rows": []}
            runs.append(head)
            continue
        m = re.match(r"compile model=\S+ shape=(\S+) eager_us=(\S+) opd_us=(\S+) ratio=(\S+)", line)
        if m and head is not None:
            head["rows"].append((m.group(1), float(m.group(2)) / 1e3,
                                 float(m.group(3)) / 1e3, float(m.group(4))))
    if not runs:
        sys.exit("plot_compile: no bench_compile lines in %s" % src)
    fig, axes = plt.subplots(1, len(runs), figsize=(5 * len(runs), 4), squeeze=False)
    for ax, r in zip(axes[0], runs):
        xs = range(len(r["rows"]))
        ax.bar([x - 0.2 for x in xs], [e for _, e, _, _ in r["rows"]], 0.4,
               label="torch eager (%s thread%s)" % (r["threads"], "" if r["threads"] == "1" else "s"))
        ax.bar([x + 0.2 for x in xs], [o for _, _, o, _ in r["rows"]], 0.4,
               label="opd graph (torch.compile)")
        for x, (_, _, o, ratio) in zip(xs, r["rows"]):
            ax.text(x + 0.2, o, "%.2fx" % ratio, ha="center", va="bottom", fontsize=9)
        ax.set_xticks(list(xs))
        ax.set_xticklabels(["B x T = %s" % s for s, _, _, _ in r["rows"]])
        ax.set_ylabel("forward time (ms)")
        ax.set_title("%s on %s" % (r["model"], r["device"]))
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("plot_compile: wrote %s" % out)


if __name__ == "__main__":
    main()
