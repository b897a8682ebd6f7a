#!/usr/bin/env bash
# levels.sh: ResNet-18 with ReLU through opd against torch's own forward, one
# bench_models.py run per daemon configuration, the configurations rotated
# REPEAT times, to see which of them the "slow level" follows (issue 13,
# docs/records/2026-12-01-stream-ordered-cost/README.md: +10-12 us per call in some programs, +4 in
# others, steady within one program and daemon). By default the daemon's
# event loop is pinned to each of CPUs 8..15 in turn (--loop-cpu: does the
# level follow the CPU the spinning loop runs on, against the client's?),
# then run with --linger-us 0 (the loop not spinning after each run) and as
# it is. Under MPS (a private control daemon, its pipes in OUTDIR); needs
# build/opd, build/opctl, build/libopd.so (a CUDA build) and torch with CUDA.
#   bash docs/records/2026-12-01-stream-ordered-cost/levels.sh [OUTDIR]
# CONFIGS: "|"-separated daemon argument lists ("" is the default daemon);
# REPEAT (2); CLIENT_CPUS (2-3); MODELS_ARGS (--models resnet18 --rounds 9
# --iters 10). Prints one line per run:
#   level run=R daemon="ARGS" torch_ms=... opd_ms=... ratio=...
set -uo pipefail
out=${1:-${OUT:-/tmp/opd-levels}}
mkdir -p "$out"
configs=${CONFIGS:---loop-cpu 8|--loop-cpu 9|--loop-cpu 10|--loop-cpu 11|--loop-cpu 12|--loop-cpu 13|--loop-cpu 14|--loop-cpu 15|--linger-us 0|}
repeat=${REPEAT:-2}
cpus=${CLIENT_CPUS:-2-3}
margs=${MODELS_ARGS:---models resnet18 --rounds 9 --iters 10}
. "$(dirname "$0")/../../../bench/lib.sh"
need_built build/opd build/opctl build/libopd.so || exit 1
mps_start "$out" || exit 1
sock=/tmp/opd-levels.sock
export OPD_SOCKET=$sock OPD_LIB=$PWD/build/libopd.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
status=0
n=0
IFS='|' read -r -a list <<<"$configs"
# a trailing "|" leaves the default daemon as the last, empty entry
[ "${configs: -1}" = "|" ] && list+=("")
for r in $(seq 1 "$repeat"); do
  for cfg in "${list[@]}"; do
    n=$((n + 1))
    # shellcheck disable=SC2086  # cfg is a list of arguments
    opd_up "$sock" "$out/opd-$n.log" build/opd --socket "$sock" $cfg || { status=1; continue; }
    # shellcheck disable=SC2086
    timeout 120 taskset -c "$cpus" python3 bench/bench_models.py $margs >"$out/models-$n.txt" 2>&1 || status=1
    grep -E "^model [a-z0-9]+ torch_ms" "$out/models-$n.txt" | while read -r _ name rest; do
      echo "level run=$n model=$name daemon=\"$cfg\" $(echo "$rest" | grep -oE "(torch_ms|opd_ms|ratio|torch_host_ms|opd_host_ms)=[^ ]+" | tr '\n' ' ')"
    done | tee -a "$out/levels.txt"
    grep -m1 -E "skipped" "$out/models-$n.txt"
    opd_down || { echo "levels: opd $cfg exit status $?: $(tail -n 1 "$out/opd-$n.log")"; status=1; }
  done
done
mps_stop
exit $status
