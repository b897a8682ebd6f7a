#!/usr/bin/env bash
# The GPU machine's test run: build with CUDA there, run every CUDA kernel
# against its CPU reference, drive the daemon's CUDA backend through
# libopd, then (with --bench) the kernel benchmarks.
#   bash tests/gpu/run.sh [--bench] [OUTDIR]
# BUILD=0: no make; build/ and build-test/ are used as they are (a build
# made elsewhere and carried here, docs/gpu.md; build/ with BENCH=1, for
# the OPD_STREAM_LEGACY modes checked below).
# Needs nvcc + gcc; libuv and msgpack-c come from .deps/gpu (unpacked
# Debian packages, see docs/gpu.md) when they are not installed.
set -uo pipefail
bench=0
[ "${1:-}" = --bench ] && { bench=1; shift; }
out=${1:-${OUT:-/tmp/opd-gpu}}
mkdir -p "$out"
. "$(dirname "$0")/../../bench/lib.sh"
deps=$(opd_deps)
status=0

echo "== machine"; nvidia-smi -L; nvcc --version | tail -n 1; gcc --version | head -n 1
echo "== build"
if [ "${BUILD:-1}" = 0 ]; then
  echo "BUILD=0: build/ and build-test/ as they are"
else
  make -j"$(nproc)" CUDA=1 BLAS=0 BENCH=1 $deps build/opd build/opctl build/tests/daemon_gpu build/tests/graph_gpu build/tests/strided_gpu \
    build/examples/hft_server/publisher build/examples/hft_server/client build/bench/bench_graph \
    build/tests/poison_gpu build/tests/ipc_gpu build/tests/async_gpu build/tests/gpu_kernels build/libopd.so \
    build/bench/bench_launch build/bench/bench_pingpong plugins \
    >"$out/build.log" 2>&1 &&
  make -j"$(nproc)" CUDA=1 BLAS=0 TEST_OPS=1 B=build-test $deps build-test/opd \
    >>"$out/build.log" 2>&1 || { tail -n 40 "$out/build.log"; exit 1; }
  grep -E "warning" "$out/build.log" | head -n 5
fi

echo "== kernels against the CPU reference"
timeout 150 build/tests/gpu_kernels >"$out/gpu_kernels.txt" 2>&1 || status=1
grep -E "FAIL" "$out/gpu_kernels.txt" | head -n 30; tail -n 1 "$out/gpu_kernels.txt"

echo "== the daemon's CUDA backend"
sock=/tmp/opd-gpu.sock
# limits above the card's memory, so that an allocation reaches CUDA and
# fails there (daemon_gpu's out-of-memory check)
opd_up "$sock" "$out/opd.log" build/opd --socket "$sock" --log-level info \
  --max-arena-bytes 4398046511104 --max-session-bytes 4398046511104 || exit 1
pid=$opd_pid
timeout 120 build/tests/daemon_gpu "$sock" >"$out/daemon_gpu.txt" 2>&1 || status=1
OPD_WAIT=spin timeout 120 build/tests/daemon_gpu "$sock" 2>&1 | grep -E "latency|passed" | sed 's/^/spin: /' >>"$out/daemon_gpu.txt"
cat "$out/daemon_gpu.txt" | grep -v "^# stats"
echo "== graphs on the CUDA backend"
timeout 120 build/tests/graph_gpu "$sock" >"$out/graph_gpu.txt" 2>&1 || status=1
cat "$out/graph_gpu.txt"
echo "== strided tensors on the CUDA backend"
timeout 120 build/tests/strided_gpu "$sock" >"$out/strided_gpu.txt" 2>&1 || status=1
cat "$out/strided_gpu.txt"
echo "== transports: opd noop over spin / adaptive / socket next to raw ping-pongs"
timeout 120 build/bench/bench_pingpong -n 100000 -s "$sock" 2>&1 | tee "$out/transports.txt" | grep -E "^(latency|error|# placement)"
echo "== CUDA IPC import"
timeout 60 build/tests/ipc_gpu "$sock" 2>&1 | tee "$out/ipc_gpu.txt" || status=1
echo "== asynchronous, stream-ordered runs from a CUDA client"
for order in gpu host; do
  echo "-- order kept on the $order (OPD_STREAM_ORDER=$order)"
  OPD_STREAM_ORDER=$order timeout 120 build/tests/async_gpu "$sock" 2>&1 |
    tee "$out/async_gpu_$order.txt" | grep -E "FAIL|passed"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
done
if [ -n "${PYTEST_GPU:-}" ]; then
  echo "== python GPU tests (torch)"
  OPD_BIN=$PWD/build/opd OPD_LIB=$PWD/build/libopd.so PYTHONPATH=$PWD/python \
    timeout 400 python3 -m pytest -q -p no:cacheprovider -rs tests/python >"$out/pytest_gpu.txt" 2>&1 || status=1
  tail -n 40 "$out/pytest_gpu.txt"
  echo "== python asynchronous runs with the order kept on the GPU (OPD_STREAM_ORDER=gpu)"
  OPD_STREAM_ORDER=gpu OPD_BIN=$PWD/build/opd OPD_LIB=$PWD/build/libopd.so PYTHONPATH=$PWD/python \
    timeout 200 python3 -m pytest -q -p no:cacheprovider -rs tests/python/test_gpu_async.py \
    >"$out/pytest_gpu_order.txt" 2>&1 || status=1
  tail -n 5 "$out/pytest_gpu_order.txt"
fi
if [ -n "${BENCH_GPU_PY:-}" ]; then
  echo "== python GPU benchmark"
  OPD_SOCKET=$sock OPD_LIB=$PWD/build/libopd.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 \
    timeout 300 python3 bench/bench_gpu.py ${BENCH_GPU_ARGS:-} >"$out/bench_gpu.txt" 2>&1 || status=1
  echo "# the tiny op over spin rings" >>"$out/bench_gpu.txt"
  OPD_WAIT=spin OPD_SOCKET=$sock OPD_LIB=$PWD/build/libopd.so PYTHONPATH=$PWD/python \
    timeout 120 python3 bench/bench_gpu.py --skip workers16,mps >>"$out/bench_gpu.txt" 2>&1 || status=1
  cat "$out/bench_gpu.txt"
fi
echo "== what the daemon holds once its clients are gone"
# host arenas were registered with CUDA; each must be unregistered and
# unmapped with its last reference (the daemon's /proc against its stats)
sleep 0.5
maps=$(grep -c '/memfd:' /proc/$pid/maps || true)
echo "/proc/$pid: $maps memfd mappings, $(ls /proc/$pid/fd | wc -l) fds, $(grep -E '^(VmRSS|RssShmem)' /proc/$pid/status | tr -s ' \n' ' ')"
build/opctl --socket "$sock" --json stats | python3 -c 'import json, sys
s = json.load(sys.stdin)
print("stats: " + " ".join("%s %s" % (k, s[k]) for k in ("sessions", "arenas", "bytes_mapped", "mappings", "mapped_bytes", "inflight")))'
[ "$maps" = 0 ] || { echo "FAIL: $maps client mappings left"; status=1; }
build/opctl --socket "$sock" stats | head -n 12
opd_down; echo "opd exit status $?"
tail -n 3 "$out/opd.log"

echo "== enqueued runs under MPS (the poll path: opd_enqueue_stream*)"
# a private MPS control daemon, its pipes in OUTDIR, for this daemon and its
# clients only; async_gpu then keeps the order on the GPU by itself
# (exported by mps_start until mps_stop)
if mps_start "$out"; then
  opd_up "$sock" "$out/opd-mps.log" build/opd --socket "$sock" || status=1
  timeout 120 build/tests/async_gpu "$sock" 2>&1 |
    tee "$out/async_gpu_mps.txt" | grep -E "FAIL|passed|note: [0-9]+ enqueued"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  # libopd's part of calls on the legacy default stream on a stream of its
  # own (OPD_STREAM_LEGACY, docs/async.md): the same checks in each mode
  # (all but direct and pdl are in the BENCH=1 build only)
  for m in direct side fork busy word kernel; do
    echo "-- again, OPD_STREAM_LEGACY=$m in the client"
    OPD_STREAM_LEGACY=$m timeout 120 build/tests/async_gpu "$sock" 2>&1 |
      tee "$out/async_gpu_mps_legacy_$m.txt" | grep -E "FAIL|passed"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  done
  if [ -n "${PYTEST_GPU:-}" ]; then
    OPD_SOCKET=$sock OPD_BIN=$PWD/build/opd \
      OPD_LIB=$PWD/build/libopd.so PYTHONPATH=$PWD/python timeout 200 python3 -m pytest -q \
      -p no:cacheprovider -rs tests/python/test_gpu_async.py >"$out/pytest_gpu_mps.txt" 2>&1 || status=1
    tail -n 3 "$out/pytest_gpu_mps.txt"
  fi
  opd_down; echo "opd exit status $?"
  # async_gpu's checks again against another daemon under the same MPS:
  #   mps_again TAG "ENV=V ..." [opd ARGS...]   (files *_TAG)
  mps_again() {
    local tag=$1 denv=$2
    shift 2
    # shellcheck disable=SC2086  # denv: a list of assignments
    opd_up "$sock" "$out/opd-mps-$tag.log" env $denv build/opd --socket "$sock" "$@" ||
      { status=1; return; }
    timeout 120 build/tests/async_gpu "$sock" 2>&1 |
      tee "$out/async_gpu_mps_$tag.txt" | grep -E "FAIL|passed|note: [0-9]+ enqueued"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    opd_down; echo "opd exit status $?"
  }
  # the path the default leaves on sm_90: the daemon without dependent
  # launches (OPD_PDL=0)
  echo "-- again, OPD_PDL=0 in the daemon"
  mps_again nopdl OPD_PDL=0
  # --word-ahead 1: a WORD run goes on the daemon's stream only once the
  # session's earlier runs completed
  echo "-- again, opd --word-ahead 1"
  mps_again wa1 "" --word-ahead 1
  mps_stop
else
  echo "FAIL: no MPS control daemon"; status=1
fi

echo "== graphs and capture: ops that may not be captured, a capture that fails (test build)"
opd_up "$sock" "$out/opd-capture.log" build-test/opd --socket "$sock" || status=1
timeout 120 build/tests/graph_gpu "$sock" >"$out/graph_gpu_test.txt" 2>&1 || status=1
grep -E "hostsync|capture|passed" "$out/graph_gpu_test.txt"
grep -E "could not be captured" "$out/opd-capture.log" | head -n 2
opd_down
echo "== the poisoned-context drill (test build with the fault op)"
opd_up "$sock" "$out/opd-poison.log" build-test/opd --socket "$sock" || status=1
timeout 60 build/tests/poison_gpu "$sock" 2>&1 | tee "$out/poison_gpu.txt" || status=1
wait "$opd_pid"; st=$?
echo "opd exit status $st (3 expected: restart me)"; [ $st = 3 ] || status=1
grep -E "poison|illegal|exit" "$out/opd-poison.log" | tail -n 5
echo "== the same drill with the fault in an asynchronous run"
opd_up "$sock" "$out/opd-poison-async.log" build-test/opd --socket "$sock" || status=1
timeout 60 build/tests/poison_gpu "$sock" async 2>&1 | tee "$out/poison_gpu_async.txt" || status=1
wait "$opd_pid"; st=$?
echo "opd exit status $st (3 expected: restart me)"; [ $st = 3 ] || status=1

if [ $bench = 1 ]; then
  echo "== the floor of a tiny op: in-process launch + sync"
  build/bench/bench_launch 20000 2>&1 | tee "$out/bench_launch.txt"
  echo "== kernel benchmarks"
  timeout 200 build/tests/gpu_kernels --bench >"$out/gpu_bench.txt" 2>&1 || status=1
  cat "$out/gpu_bench.txt" | tail -n 60
  echo "== torch's own kernels, same shapes, same run"
  timeout 120 python3 bench/bench_torch_kernels.py 2>&1 | tee "$out/torch_bench.txt"
fi
exit $status
