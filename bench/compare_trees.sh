#!/usr/bin/env bash
# Before/after on one machine in one run: two source trees (an old commit
# checked out into OLD, and this tree), each built with CUDA, each
# benchmarked against a daemon of its own on a private socket, in
# alternating rounds (the machine's noise falls on both columns alike).
#   bash bench/compare_trees.sh [--build] OLD [OUTDIR]
# OLD: e.g. `git archive <commit> | tar -x -C .old`. Prints, per round and
# tree: bench_pingpong (spin / adaptive / socket next to raw ping-pongs),
# the tiny op from Python (bench_gpu.py tiny) and the 16 workers
# (bench_gpu.py workers16). --build builds both trees first (in parallel).
set -uo pipefail
build=0
[ "${1:-}" = --build ] && { build=1; shift; }
old=${1:?usage: compare_trees.sh [--build] OLD [OUTDIR]}
out=${2:-/tmp/opd-compare}
rounds=${ROUNDS:-2}
mkdir -p "$out"
. "$(dirname "$0")/lib.sh"
deps=$(opd_deps)
targets="build/opd build/opctl build/libopd.so build/bench/bench_pingpong"
if [ $build = 1 ]; then
  echo "== build (both trees)"
  make -j8 CUDA=1 BLAS=0 $deps $targets >"$out/build-new.log" 2>&1 &
  p1=$!
  (cd "$old" && make -j8 CUDA=1 BLAS=0 DEPS=$PWD/../.deps/gpu $targets) \
    >"$out/build-old.log" 2>&1 &
  p2=$!
  wait $p1 || { tail -n 30 "$out/build-new.log"; exit 1; }
  wait $p2 || { tail -n 30 "$out/build-old.log"; exit 1; }
fi
for r in $(seq 1 "$rounds"); do
  for t in "$old" .; do
    name=new; [ "$t" = "$old" ] && name=old
    sock=/tmp/opd-cmp-$name.sock
    OPCTL=$t/build/opctl opd_up "$sock" "$out/opd-$name-$r.log" "$t/build/opd" --socket "$sock" \
      --log-level warn || continue
    echo "== round $r, $name tree ($t): bench_pingpong -n 50000"
    timeout 120 "$t/build/bench/bench_pingpong" -n 50000 -s "$sock" 2>&1 | grep -E "^latency" | sed "s/^/$name: /"
    echo "== round $r, $name tree: bench_gpu.py (tiny, 16 workers)"
    OPD_SOCKET=$sock OPD_LIB=$PWD/$t/build/libopd.so PYTHONPATH=$PWD/$t/python PYTHONUNBUFFERED=1 \
      timeout 200 python3 "$t/bench/bench_gpu.py" --calls 3000 --seconds 4 --skip mps 2>&1 \
      | grep -E "^gpu " | sed "s/^/$name: /"
    opd_down 2>/dev/null
  done
done
