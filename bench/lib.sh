# lib.sh: what the GPU machine's scripts (bench/*.sh, tests/gpu/*.sh) share:
# where libuv and msgpack-c come from, a private MPS control daemon, and a
# daemon started and waited for. Sourced, not run:
#   . "$(dirname "$0")/lib.sh"        (from bench/)
#   . "$(dirname "$0")/../../bench/lib.sh"   (from tests/gpu/)
# tests/python/test_gpu_scripts.py runs these functions on a machine with no
# GPU (a CPU daemon, a stand-in for nvidia-cuda-mps-control).

# opd_deps: make's DEPS=... when libuv's headers are not installed (the GPU
# machine: unpacked Debian packages in .deps/gpu, docs/gpu.md), else nothing.
# Unquoted on make's line: `make $(opd_deps) ...`
opd_deps() {
  [ -f /usr/include/uv.h ] || echo "DEPS=$PWD/.deps/gpu"
}

# need_built FILE...: returns 1, naming the first one missing, unless every
# FILE is there (what a script needs from a CUDA build made before it).
need_built() {
  local f
  for f in "$@"; do
    [ -e "$f" ] || { echo "$(basename "$0"): $f missing (a CUDA build first)"; return 1; }
  done
}

# mps_start DIR: a private MPS control daemon for this script's processes,
# its pipes in DIR/mps-pipe and logs in DIR/mps-log (exported, so that every
# CUDA process started after it is its client). Returns 1, saying so, when
# the control daemon cannot be started.
mps_start() {
  export CUDA_MPS_PIPE_DIRECTORY=$1/mps-pipe CUDA_MPS_LOG_DIRECTORY=$1/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || {
    echo "$(basename "$0"): no MPS control daemon (nvidia-cuda-mps-control -d failed)"
    return 1
  }
}

# mps_stop: the control daemon of mps_start told to quit (its server goes
# with it), the pipes' directory removed; the environment no longer points
# at it.
mps_stop() {
  [ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] || return 0
  echo quit | timeout 20 nvidia-cuda-mps-control
  rm -rf "$CUDA_MPS_PIPE_DIRECTORY"
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}

# opd_up SOCK LOG COMMAND...: COMMAND (a daemon on SOCK: build/opd --socket
# SOCK ..., maybe behind taskset or env) started in the background, its
# output in LOG; returns once `opctl ping` answers on SOCK (opd_pid: its
# pid). Returns 1, with LOG's tail, when the daemon exits first or does not
# answer within OPD_UP_S seconds (10). OPCTL: the opctl to ping with
# (build/opctl).
opd_up() {
  local sock=$1 log=$2 i
  shift 2
  "$@" >"$log" 2>&1 &
  opd_pid=$!
  for i in $(seq 1 $((${OPD_UP_S:-10} * 10))); do
    "${OPCTL:-build/opctl}" --socket "$sock" ping -c 1 >/dev/null 2>&1 && return 0
    kill -0 "$opd_pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$opd_pid" 2>/dev/null; then
    echo "$(basename "$0"): opd did not answer on $sock within ${OPD_UP_S:-10} s: $*"
    kill -KILL "$opd_pid" 2>/dev/null
  else
    echo "$(basename "$0"): opd exited before answering on $sock: $*"
  fi
  wait "$opd_pid" 2>/dev/null
  tail -n 20 "$log"
  opd_pid=
  return 1
}

# opd_down: the daemon of opd_up stopped as its service manager would
# (SIGTERM), waited for; returns its exit status (0: a clean stop).
opd_down() {
  [ -n "${opd_pid:-}" ] || return 0
  local st
  kill -TERM "$opd_pid" 2>/dev/null
  wait "$opd_pid"
  st=$?
  opd_pid=
  return $st
}
