#!/usr/bin/env python3
"""stamps.py: where an ordered opd run's GPU time goes, from %globaltimer
stamps taken by the kernels of both processes (a diagnostic; docs/async.md
"Timestamps").

Run the daemon with OPD_GPU_STAMPS=DIR and the client with
OPD_STREAM_STAMPS=1 (a libopd built with `make BENCH=1`): each session's stamps go to DIR/stamps-PID-SID-DEV.txt
when it ends, one line per enqueued run that stamped (the last 16384 of
the session): request id, the client's poll kernel start and seen (the
daemon's word there), the daemon's wait kernel start, the client's word
seen, the daemon's flag store (ns). For each file this prints, over its
runs, medians and 10th/90th percentiles (us) of:
  lead   word seen - wait start: how long the daemon's wait kernel was
         resident before the client's word came (near 0: the daemon's
         stream was late, not the client's)
  there  word seen - poll start: the client's word against its own poll
         kernel's start (negative: the daemon had it before the client's
         stream got to its poll kernel)
  op     flag store - word seen: the op on the daemon's stream, with the
         dependent launches around it
  back   poll seen - flag store: the daemon's word reaching the client's
         poll kernel
  poll   poll seen - poll start: the client's poll kernel, all of it
  late   runs whose lead was under 0.5 us (%)
Usage: python3 bench/stamps.py DIR [--min-runs 50]
"""
import glob
import os
import sys


def pct(v, q):
    v = sorted(v)
    if not v:
        return float("nan")
    i = min(len(v) - 1, max(0, int(round(q * (len(v) - 1)))))
    return v[i]


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            p = [int(x) for x in line.split()]
            if len(p) == 6 and all(p[1:]):
                rows.append(p)
    rows.sort()
    return rows


def summary(rows):
    parts = {"lead": [], "there": [], "op": [], "back": [], "poll": []}
    late = 0
    for req, ps, pseen, ws, wseen, fs in rows:
        lead = (wseen - ws) / 1e3
        parts["lead"].append(lead)
        parts["there"].append((wseen - ps) / 1e3)
        parts["op"].append((fs - wseen) / 1e3)
        parts["back"].append((pseen - fs) / 1e3)
        parts["poll"].append((pseen - ps) / 1e3)
        late += lead < 0.5
    return parts, late


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    d = argv[0]
    min_runs = 50
    if "--min-runs" in argv:
        min_runs = int(argv[argv.index("--min-runs") + 1])
    files = sorted(glob.glob(os.path.join(d, "stamps-*.txt")), key=os.path.getmtime)
    if not files:
        print("stamps: no stamps-*.txt in %s (daemon without OPD_GPU_STAMPS, or "
              "no session ended)" % d)
        return 1
    for path in files:
        rows = load(path)
        if len(rows) < min_runs:
            continue
        parts, late = summary(rows)
        cols = " ".join("%s=%.2f[%.2f,%.2f]" % (k, pct(v, 0.5), pct(v, 0.1), pct(v, 0.9))
                        for k, v in parts.items())
        print("stamps %s runs=%d %s late=%.0f%%" % (os.path.basename(path), len(rows),
                                                    cols, 100.0 * late / len(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
