#!/usr/bin/env bash
# probe.sh: the GPU machine's diagnostic run behind docs/async.md's "where
# a call's time goes": under MPS (a private control daemon, pipes in
# OUTDIR), a fresh build/opd with DAEMON_ARGS, then bench/probe_calls.py
# (per-call host time inside GPT-2 and ResNet-18) and, with PROFILE=1,
# bench/profile_torch_ops.py. Everything goes to OUTDIR/probe*.txt.
#   bash bench/probe.sh [OUTDIR] [DAEMON_ARGS...]
set -uo pipefail
out=${1:-${OUT:-/tmp/opd-probe}}
shift || true
mkdir -p "$out"
deps=
[ -f /usr/include/uv.h ] || deps=DEPS=$PWD/.deps/gpu
make -j"$(nproc)" CUDA=1 BLAS=0 $deps build/opd build/opctl build/libopd.so \
  >"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
export CUDA_MPS_PIPE_DIRECTORY=$out/mps-pipe CUDA_MPS_LOG_DIRECTORY=$out/mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d || { echo "no MPS"; exit 1; }
sock=/tmp/opd-probe.sock
build/opd --socket "$sock" "$@" >"$out/probe-opd.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do build/opctl --socket "$sock" ping -c 1 >/dev/null 2>&1 && break; sleep 0.1; done
export OPD_SOCKET=$sock OPD_LIB=$PWD/build/libopd.so PYTHONUNBUFFERED=1
echo "== probe_calls (opd $*)"
timeout 150 python3 bench/probe_calls.py ${PROBE_ARGS:-} 2>&1 | tee "$out/probe-full.txt" |
  grep -v "^opd: " | tee "$out/probe.txt"
if [ -n "${PROFILE:-}" ]; then
  PYTHONPATH=$PWD/python timeout 120 python3 bench/profile_torch_ops.py -n 2000 --top 30 >"$out/profile.txt" 2>&1
fi
kill -TERM "$pid"; wait "$pid"
grep -E "spin: .*linger|ordered runs, kernel" "$out/probe-opd.log"
echo quit | nvidia-cuda-mps-control
rm -rf "$CUDA_MPS_PIPE_DIRECTORY"
