#!/usr/bin/env bash
# probe.sh: the GPU machine's diagnostic run behind docs/async.md's "where
# a call's time goes": under MPS (a private control daemon, pipes in
# OUTDIR), a fresh build/opd with DAEMON_ARGS, then docs/records/2026-12-01-stream-ordered-cost/probe_calls.py
# (per-call host time inside GPT-2 and ResNet-18) and, with PROFILE=1,
# bench/profile_torch_ops.py. Everything goes to OUTDIR/probe*.txt. libopd
# is built with BENCH=1 (OPD_STREAM_TRACE).
#   bash docs/records/2026-12-01-stream-ordered-cost/probe.sh [OUTDIR] [DAEMON_ARGS...]
set -uo pipefail
out=${1:-${OUT:-/tmp/opd-probe}}
shift || true
mkdir -p "$out"
. "$(dirname "$0")/../../../bench/lib.sh"
make -j"$(nproc)" CUDA=1 BLAS=0 BENCH=1 $(opd_deps) build/opd build/opctl build/libopd.so \
  >"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
mps_start "$out" || exit 1
sock=/tmp/opd-probe.sock
opd_up "$sock" "$out/probe-opd.log" build/opd --socket "$sock" "$@" || { mps_stop; exit 1; }
export OPD_SOCKET=$sock OPD_LIB=$PWD/build/libopd.so PYTHONUNBUFFERED=1
echo "== probe_calls (opd $*)"
timeout 150 python3 docs/records/2026-12-01-stream-ordered-cost/probe_calls.py ${PROBE_ARGS:-} 2>&1 | tee "$out/probe-full.txt" |
  grep -v "^opd: " | tee "$out/probe.txt"
if [ -n "${PROFILE:-}" ]; then
  PYTHONPATH=$PWD/python timeout 120 python3 bench/profile_torch_ops.py -n 2000 --top 30 >"$out/profile.txt" 2>&1
fi
opd_down || echo "probe: opd exit status $?"
grep -E "spin: .*linger|ordered runs, kernel" "$out/probe-opd.log"
mps_stop
