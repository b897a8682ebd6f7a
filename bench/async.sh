#!/usr/bin/env bash
# async.sh: the GPU machine's run for the asynchronous runs' figures: builds with CUDA,
# then with and without MPS (a private MPS control daemon, its pipes in
# OUTDIR) runs bench_handoff (two processes, no daemon), starts a daemon and
# runs bench_stream (a CUDA client in C), bench_enqueue (libopd's variants in one process),
# bench_async_ops.py, and bench_models.py + bench_chain.py (GPT-2 and
# ResNet-18 through torch.ops.opd against torch). Everything they print
# goes to OUTDIR/<mode>/.
#   bash bench/async.sh [OUTDIR] [MODES]    (MODES: "nomps mps", the default)
# BUILD=0: use build/ as it is; NO_MODELS=1: no models or chain; AGAIN="ENV=V:tag
# ...": the models and the chain again under each ENV=V, files *_tag (default
# OPD_STREAM_POLL=0:wait, each call waiting for the daemon's answer;
# OPD_STREAM_WORDS=0:events, the daemon's stream waiting on the client's
# interprocess events instead of polling its words); MODELS_ARGS:
# bench_models.py's (--rounds 5
# --iters 10).
set -uo pipefail
out=${1:-${OUT:-/tmp/opd-async}}
modes=${2:-nomps mps}
mkdir -p "$out"
. "$(dirname "$0")/lib.sh"
status=0
if [ "${BUILD:-1}" != 0 ]; then
  make -j"$(nproc)" CUDA=1 BLAS=0 $(opd_deps) build/opd build/opctl build/libopd.so \
    build/bench/bench_stream build/bench/bench_handoff build/bench/bench_enqueue >"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
fi
for mode in $modes; do
  o=$out/$mode; mkdir -p "$o"
  echo "== $mode"
  if [ "$mode" = mps ]; then
    mps_start "$o" || { status=1; continue; }
  else
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  fi
  sock=/tmp/opd-async-$mode.sock
  opd_up "$sock" "$o/opd.log" build/opd --socket "$sock" || { status=1; mps_stop; continue; }
  timeout 60 build/bench/bench_handoff 300 2>&1 | tee "$o/bench_handoff.txt"
  timeout 60 build/bench/bench_stream "$sock" 500 2>&1 | tee "$o/bench_stream.txt"
  timeout 120 build/bench/bench_enqueue "$sock" 400 2>&1 | tee "$o/bench_enqueue.txt"
  export OPD_SOCKET=$sock OPD_LIB=$PWD/build/libopd.so PYTHONUNBUFFERED=1
  timeout 90 python3 bench/bench_async_ops.py 2>&1 | tee "$o/bench_async_ops.txt"
  if [ -n "${PROFILE:-}" ]; then
    timeout 120 python3 bench/profile_torch_ops.py -n 2000 --top 25 2>&1 | tee "$o/profile.txt" | tail -n 60
  fi
  if [ -z "${NO_MODELS:-}" ]; then
    timeout 240 python3 bench/bench_models.py ${MODELS_ARGS:---rounds 5 --iters 10} \
      --json "$o/models.json" 2>&1 | tee "$o/models.txt" || status=1
    timeout 90 python3 bench/bench_chain.py --json "$o/chain.json" 2>&1 | tee "$o/chain.txt" || status=1
  fi
  # the same again with ENV set (tag: the files' suffix)
  again() {
    local env=$1 tag=$2
    env "$env" timeout 240 python3 bench/bench_models.py ${MODELS_ARGS:---rounds 5 --iters 10} \
      --json "$o/models_$tag.json" 2>&1 | tee "$o/models_$tag.txt" | grep -E "^# torch.ops|^(gpt2|resnet|model  )" || status=1
    env "$env" timeout 90 python3 bench/bench_chain.py --json "$o/chain_$tag.json" 2>&1 |
      tee "$o/chain_$tag.txt" | grep -E "ratio" || status=1
  }
  # AGAIN: "ENV=VALUE:tag ..." (default: each call waiting for the daemon's
  # answer; the daemon's stream waiting on the client's events, not its words)
  if [ -z "${NO_MODELS:-}" ]; then
    for a in ${AGAIN:-OPD_STREAM_POLL=0:wait OPD_STREAM_WORDS=0:events}; do
      echo "-- the same, ${a%%:*}"
      again "${a%%:*}" "${a##*:}"
    done
  fi
  unset OPD_SOCKET
  opd_down || { echo "async: opd exit status $?"; status=1; }
  grep -E "cuda: .* jobs" "$o/opd.log" | tail -n 1
  mps_stop
done
exit $status
