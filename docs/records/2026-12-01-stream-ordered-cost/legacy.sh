#!/usr/bin/env bash
# legacy.sh: the models and the chain through opd with libopd's part of each
# call on the legacy default stream itself or on a stream of libopd's
# (OPD_STREAM_LEGACY=direct|side|fork|busy|word, docs/async.md "The legacy default
# stream"), the modes compared in one process (bench_models.py and
# bench_chain.py --legacy: an opd@MODE variant per mode in the same rounds),
# REPEAT processes in turn against one daemon, under MPS (a private control
# daemon, its pipes in OUTDIR). Needs build/opd, build/opctl, build/libopd.so
# (a CUDA build with BENCH=1: the modes but direct and pdl, and
# opd__stream_legacy, are in that build only) and torch with CUDA.
#   bash docs/records/2026-12-01-stream-ordered-cost/legacy.sh [OUTDIR]
# MODES (direct,side,fork,busy,word,kernel,pdl); REPEAT (2); CLIENT_CPUS (2-3); DAEMON_CPUS
# (8-11); MODELS_ARGS (--models resnet18,gpt2,resnet18conv --rounds 15
# --iters 10); CHAIN_ARGS (--rounds 6); PROBE=1 also runs
# docs/records/2026-12-01-stream-ordered-cost/probe_level.py --variants opd_MODE...,torch_s,opd_s. Before the
# figures, when build/tests/async_gpu is there, its checks against the same
# daemon once per mode (OPD_STREAM_LEGACY=MODE): a mode that fails them is
# not measured. After them, when build/bench/probe_stretch is there, the C
# probe's hand-off on each stream (STRETCH: its variants, "memset/pdl,
# memset/pdl@legacy,memset/pdl@side,memset/pdl@fork,memset/pdl+query,
# memset/pdl+query@legacy,one/pdl,one/pdl@legacy,onepdl/pdl@legacy": +query
# is libopd's idle check, one/ the word written by the poll kernel, onepdl/
# that kernel a dependent launch; STRETCH_ARGS: S and R, "200 9"). Prints, per run, the models' lines (ratio=: the process's
# default mode; ratio@MODE=) and the chain's:
#   legacy check mode=MODE passed|FAILED
#   legacy run=R model=NAME torch_ms=... ratio=... ratio@direct=... ...
#   legacy run=R chain legacy=MODE opd/torch=... opd_batch/torch=...
#   legacy stretch variant=... per_handoff_us=... ratio=...   (probe_stretch)
set -uo pipefail
out=${1:-${OUT:-/tmp/opd-legacy}}
mkdir -p "$out"
modes=${MODES:-direct,side,fork,busy,word,kernel,pdl}
repeat=${REPEAT:-2}
cpus=${CLIENT_CPUS:-2-3}
dcpus=${DAEMON_CPUS:-8-11}
margs=${MODELS_ARGS:---models resnet18,gpt2,resnet18conv --rounds 15 --iters 10}
cargs=${CHAIN_ARGS:---rounds 6}
. "$(dirname "$0")/../../../bench/lib.sh"
need_built build/opd build/opctl build/libopd.so || exit 1
nm -D --defined-only build/libopd.so | grep -q ' opd__stream_legacy$' || {
  echo "legacy.sh: build/libopd.so is not a bench build: make CUDA=1 BENCH=1 build/libopd.so"
  exit 1
}
mps_start "$out" || exit 1
sock=/tmp/opd-legacy.sock
export OPD_SOCKET=$sock OPD_LIB=$PWD/build/libopd.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
opd_up "$sock" "$out/opd.log" taskset -c "$dcpus" build/opd --socket "$sock" || { mps_stop; exit 1; }
status=0
if [ -x build/tests/async_gpu ]; then
  ok=
  for m in ${modes//,/ }; do
    if OPD_STREAM_LEGACY=$m timeout 120 build/tests/async_gpu "$sock" >"$out/async_gpu-$m.txt" 2>&1; then
      echo "legacy check mode=$m passed"; ok=$ok${ok:+,}$m
    else
      echo "legacy check mode=$m FAILED: $(grep -m3 -E "FAIL|error" "$out/async_gpu-$m.txt" | tr '\n' ' ')"
      status=1
    fi
  done
  modes=$ok
  [ -n "$modes" ] || { opd_down; mps_stop; exit 1; }
fi
for r in $(seq 1 "$repeat"); do
  # shellcheck disable=SC2086  # margs, cargs: argument lists
  timeout 300 taskset -c "$cpus" python3 bench/bench_models.py $margs --legacy "$modes" \
    >"$out/models-$r.txt" 2>&1 || status=1
  grep -E "^model [a-z0-9]+ torch_ms" "$out/models-$r.txt" | while read -r _ name rest; do
    echo "legacy run=$r model=$name $(echo "$rest" | grep -oE "(torch_ms|opd_ms|ratio|ratio@[a-z]+|torch_host_ms|check)=[^ ]+" | tr '\n' ' ')"
  done
  grep -m1 -E "skipped|Error|error" "$out/models-$r.txt"
  # shellcheck disable=SC2086
  timeout 200 taskset -c "$cpus" python3 bench/bench_chain.py $cargs --legacy "$modes" \
    >"$out/chain-$r.txt" 2>&1 || status=1
  grep -E "^chain (ratio|legacy)" "$out/chain-$r.txt" | sed "s/^/legacy run=$r /"
  if [ "${PROBE:-0}" = 1 ]; then
    pv="opd_${modes//,/,opd_},torch_s,opd_s"
    timeout 200 taskset -c "$cpus" python3 docs/records/2026-12-01-stream-ordered-cost/probe_level.py --skip hold \
      --rounds 15 --variants "$pv" >"$out/probe-$r.txt" 2>&1 || status=1
    grep -E "^stream" "$out/probe-$r.txt" | sed "s/^/legacy run=$r /"
  fi
done
opd_down || { echo "legacy: opd exit status $?"; status=1; }
if [ -x build/bench/probe_stretch ]; then
  # shellcheck disable=SC2086  # STRETCH_ARGS: S R
  timeout 300 build/bench/probe_stretch ${STRETCH_ARGS:-200 9} \
    "${STRETCH:-memset/pdl,memset/pdl@legacy,memset/pdl@side,memset/pdl@fork,memset/pdl+query,memset/pdl+query@legacy,one/pdl,one/pdl@legacy,onepdl/pdl@legacy}" \
    >"$out/stretch.txt" 2>&1 || status=1
  grep -E "^stretch|failed" "$out/stretch.txt" | sed "s/^/legacy /"
fi
mps_stop
exit $status
