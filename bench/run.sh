#!/usr/bin/env bash
# run.sh: runs opd's benchmarks against a private daemon and keeps the output.
#
# DESIGN
# `make bench` calls `bash bench/run.sh build`. The daemon runs on a socket
# in a fresh temp dir, so a daemon the user already has is never touched;
# we wait (5 s at most) until `opctl ping` answers, run each benchmark,
# stop the daemon with SIGTERM and wait for its clean exit. Everything
# printed is also written to bench/results/<YYYY-MM-DD>-<hostname>.txt
# (UTC date; a second run the same day replaces it). The EXIT trap stops
# the daemon and removes the temp dir on every path, errors included.
#
# Usage: bash bench/run.sh BUILD_DIR [BENCH_ARGS...]
#   BENCH_ARGS go to bench_roundtrip (e.g. -n 20000 for a quick run).
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: bash bench/run.sh BUILD_DIR [BENCH_ARGS...]" >&2
  exit 2
fi
build=$1
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

for f in "$build/opd" "$build/opctl" "$build/bench/bench_roundtrip"; do
  if [ ! -x "$f" ]; then
    echo "bench/run.sh: $f is missing; build it first (make bench)" >&2
    exit 1
  fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/opd-bench.XXXXXX")
sock=$tmp/opd.sock
log=$tmp/opd.log
daemon=""

cleanup() {
  if [ -n "$daemon" ] && kill -0 "$daemon" 2>/dev/null; then
    kill -TERM "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$build/opd" --socket "$sock" >"$log" 2>&1 &
daemon=$!

# up to 5 s for the daemon to answer a ping; give up early if it died
up=0
for _ in $(seq 1 100); do
  if ! kill -0 "$daemon" 2>/dev/null; then break; fi
  if "$build/opctl" -s "$sock" ping -c 1 >/dev/null 2>&1; then
    up=1
    break
  fi
  sleep 0.05
done
if [ "$up" != 1 ]; then
  if kill -0 "$daemon" 2>/dev/null; then
    echo "bench/run.sh: opd did not answer a ping on $sock within 5 s" >&2
  else
    st=0
    wait "$daemon" || st=$?
    daemon=""
    echo "bench/run.sh: opd exited (status $st) before answering a ping" >&2
  fi
  echo "---- opd log ($log) ----" >&2
  cat "$log" >&2
  echo "------------------------" >&2
  exit 1
fi

mkdir -p "$here/results"
out=$here/results/$(date -u +%Y-%m-%d)-$(hostname).txt

run_all() {
  echo "# bench/run.sh: $(date -u +%Y-%m-%dT%H:%M:%SZ) build=$build"
  "$build/bench/bench_roundtrip" "$@" "$sock"
  if [ -x "$build/bench/bench_cpu_ops" ]; then
    OPD_SOCKET=$sock "$build/bench/bench_cpu_ops"
  else
    echo "# bench_cpu_ops: not built, skipped"
  fi
  if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
    OPD_LIB=$build/libopd.so /usr/bin/python3 "$here/bench_python.py" --socket "$sock"
  else
    echo "# bench_python: no numpy for /usr/bin/python3, skipped"
  fi
  # the MLP as a graph (bench_graph.py runs the C bench_graph too)
  if /usr/bin/python3 -c 'import numpy, torch' 2>/dev/null; then
    OPD_LIB=$build/libopd.so /usr/bin/python3 "$here/bench_graph.py" --socket "$sock" \
      --c-bench "$build/bench/bench_graph"
  elif [ -x "$build/bench/bench_graph" ]; then
    "$build/bench/bench_graph" --socket "$sock"
  fi
}

st=0
OPD_SOCKET=$sock run_all "$@" 2>&1 | tee "$out" || st=$?
if [ "$st" != 0 ]; then
  echo "bench/run.sh: a benchmark failed (status $st); opd log:" >&2
  cat "$log" >&2
  exit "$st"
fi

# stop the daemon ourselves so that an unclean exit is reported
kill -TERM "$daemon"
st=0
wait "$daemon" || st=$?
daemon=""
if [ "$st" != 0 ]; then
  echo "bench/run.sh: opd exited with status $st after SIGTERM; its log:" >&2
  cat "$log" >&2
  exit 1
fi
echo "bench/run.sh: results in ${out#"$PWD"/}"
