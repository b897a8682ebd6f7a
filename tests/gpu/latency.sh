#!/usr/bin/env bash
# The latency figures on the GPU machine, in one run:
# the in-process floor of a tiny op (bench_launch, with the pieces of the
# daemon's completion path), the tiny op through the daemon from C and
# from Python over each transport, and the noop round trip per transport
# from C and Python next to the raw ping-pongs.
#   bash tests/gpu/latency.sh [OUTDIR]
# The daemon runs on CPUs 2-7 (taskset) with its event loop pinned to CPU 2
# (--loop-cpu 2: the CPU bench_pingpong gives its raw baselines' child, so
# the opd round trips cross the same pair of CPUs as the raw ones); the
# clients run where bench_pingpong pins them (CPU 1) or on CPU 0; see
# bench/results/README.md.
set -uo pipefail
out=${1:-${OUT:-/tmp/opd-latency}}
mkdir -p "$out"
. "$(dirname "$0")/../../bench/lib.sh"
make -j"$(nproc)" CUDA=1 BLAS=0 $(opd_deps) build/opd build/opctl build/libopd.so \
  build/tests/daemon_gpu build/bench/bench_launch build/bench/bench_pingpong \
  >"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
sock=/tmp/opd-lat.sock
echo "== cpus (lscpu -e)"; lscpu -e=CPU,CORE,SOCKET,NODE 2>/dev/null | head -n 17
# the limits of tests/gpu/run.sh, so that daemon_gpu's out-of-memory check
# reaches CUDA
opd_up "$sock" "$out/opd.log" taskset -c 2-7 build/opd --socket "$sock" --loop-cpu 2 \
  --max-arena-bytes 4398046511104 --max-session-bytes 4398046511104 || exit 1
export OPD_SOCKET=$sock OPD_LIB=$PWD/build/libopd.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1

echo "== tiny op floor: in-process launch + sync, and the completion pieces"
taskset -c 0,1 build/bench/bench_launch 20000 2>&1 | tee "$out/bench_launch.txt"
echo "== tiny op through the daemon from C (daemon_gpu latency lines)"
for w in spin adaptive; do
  OPD_WAIT=$w taskset -c 0 timeout 120 build/tests/daemon_gpu "$sock" 2>&1 | grep -E "^latency|passed|FAIL"
done | tee "$out/daemon_gpu.txt"
echo "== tiny op from Python (bench_gpu.py tiny)"
for w in spin adaptive; do
  echo "# OPD_WAIT=$w"
  OPD_WAIT=$w taskset -c 0 timeout 120 python3 bench/bench_gpu.py --skip workers16,mps 2>&1
done | tee "$out/bench_gpu_tiny.txt"
echo "== noop per transport from C, next to the raw ping-pongs"
timeout 200 build/bench/bench_pingpong -n 100000 -s "$sock" 2>&1 | tee "$out/transports.txt" | grep -E "^(latency|error|# placement|# stalls)"
echo "== noop per transport from Python"
taskset -c 0 timeout 200 python3 bench/bench_python.py --socket "$sock" -n 100000 --sizes 4K \
  2>&1 | tee "$out/python.txt" | grep -E "^(latency transport|error|#)"
opd_down; echo "opd exit status $?"
grep -a -E "jobs under 1 ms|spin: " "$out/opd.log" # where a tiny GPU job's time goes; the gaps between spin windows
