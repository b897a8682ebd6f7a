#!/usr/bin/env bash
# Before/after on one machine in one run: two source trees (an old commit
# checked out into OLD, and this tree), each benchmarked against a daemon of
# its own on a private socket, in alternating rounds (the machine's noise
# falls on both columns alike).
#   bash bench/compare_trees.sh [--build] OLD [OUTDIR]
# OLD: e.g. `git archive <commit> | tar -x -C .old`. --build builds both trees
# first (in parallel). ROUNDS (2) rounds.
#   GPU (default): each tree built with CUDA in build/. Prints, per round and
#   tree: bench_pingpong (spin / adaptive / socket next to raw ping-pongs),
#   the tiny op from Python (bench_gpu.py tiny) and the 16 workers
#   (bench_gpu.py workers16).
#   CPU=1: each tree built with CUDA=0 in build-cpu/ (B= another), for the
#   CPU machine: bench_pingpong, bench_roundtrip (noop and small CPU ops over
#   the default transport) and bench_python.py's latency lines and 4K/1M
#   hand-offs (Debian's /usr/bin/python3 with numpy).
# N (50000): round trips per bench_pingpong case. NEW_ARGS: more options for
# this tree's daemon only (e.g. --spin always, which an old tree may not know).
set -uo pipefail
build=0
[ "${1:-}" = --build ] && { build=1; shift; }
old=${1:?usage: compare_trees.sh [--build] OLD [OUTDIR]}
out=${2:-/tmp/opd-compare}
rounds=${ROUNDS:-2}
cpu=${CPU:-0}
n=${N:-50000}
mkdir -p "$out"
. "$(dirname "$0")/lib.sh"
if [ "$cpu" = 1 ]; then
  b=${B:-build-cpu}
  flags="CUDA=0 B=$b"
  targets="$b/opd $b/opctl $b/libopd.so $b/bench/bench_pingpong $b/bench/bench_roundtrip"
else
  b=build
  flags="CUDA=1 BLAS=0 $(opd_deps)"
  targets="$b/opd $b/opctl $b/libopd.so $b/bench/bench_pingpong"
fi
if [ $build = 1 ]; then
  echo "== build (both trees)"
  jobs=$(($(nproc) > 16 ? 8 : ($(nproc) + 1) / 2))
  # shellcheck disable=SC2086  # flags and targets are word lists
  make -j"$jobs" $flags $targets >"$out/build-new.log" 2>&1 &
  p1=$!
  # shellcheck disable=SC2086
  (cd "$old" && make -j"$jobs" $flags $targets) >"$out/build-old.log" 2>&1 &
  p2=$!
  wait $p1 || { tail -n 30 "$out/build-new.log"; exit 1; }
  wait $p2 || { tail -n 30 "$out/build-old.log"; exit 1; }
fi
for r in $(seq 1 "$rounds"); do
  for t in "$old" .; do
    name=new; [ "$t" = "$old" ] && name=old
    ta=$(cd "$t" && pwd)
    extra=""; [ $name = new ] && extra=${NEW_ARGS:-}
    sock=/tmp/opd-cmp-$name.sock
    # shellcheck disable=SC2086  # extra: a word list
    OPCTL=$t/$b/opctl opd_up "$sock" "$out/opd-$name-$r.log" "$t/$b/opd" --socket "$sock" \
      --log-level warn $extra || continue
    echo "== round $r, $name tree ($t): bench_pingpong -n $n"
    timeout 300 "$t/$b/bench/bench_pingpong" -n "$n" -s "$sock" 2>&1 | grep -E "^latency" |
      sed "s/^/$name: /"
    if [ "$cpu" = 1 ]; then
      echo "== round $r, $name tree: bench_roundtrip -n 20000"
      timeout 300 "$t/$b/bench/bench_roundtrip" -n 20000 "$sock" 2>&1 |
        grep -vE "^#|^$" | sed "s/^/$name: /"
      echo "== round $r, $name tree: bench_python.py -n 20000 --sizes 4K,1M"
      OPD_LIB=$ta/$b/libopd.so PYTHONPATH=$ta/python PYTHONUNBUFFERED=1 \
        timeout 300 /usr/bin/python3 "$t/bench/bench_python.py" --socket "$sock" -n 20000 \
        --sizes 4K,1M 2>&1 | grep -E "^(latency|handoff)" | sed "s/^/$name: /"
    else
      echo "== round $r, $name tree: bench_gpu.py (tiny, 16 workers)"
      OPD_SOCKET=$sock OPD_LIB=$ta/$b/libopd.so PYTHONPATH=$ta/python PYTHONUNBUFFERED=1 \
        timeout 200 python3 "$t/bench/bench_gpu.py" --calls 3000 --seconds 4 --skip mps 2>&1 \
        | grep -E "^gpu " | sed "s/^/$name: /"
    fi
    opd_down 2>/dev/null
  done
done
