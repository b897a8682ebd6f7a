#!/usr/bin/env bash
# The GPU machine in two short calls, for a lease of a few minutes (each
# well inside one call's 10 minutes; the machine stays warm ~30 s between
# them, so call B right after A):
#   bash tests/gpu/quick.sh A    build (sm_90), every CUDA kernel against its
#                                CPU reference, the daemon's CUDA backend
#                                (daemon_gpu, graph_gpu, strided_gpu), the GPU
#                                python tests, tests/torch2 on the machine's
#                                torch, GPT-2 under torch.compile against eager
#   bash tests/gpu/quick.sh B    (after A, same machine) bench_graph (Python
#                                and C over spin), bench_sdpa, bench_dask
#                                --device cuda (needs .whl carried: docs/dask.md),
#                                the same graph and GPT-2 runs under MPS
#   bash tests/gpu/quick.sh C    (after A) issue 39's workload:
#                                bench_latency_gpu.py, the latency MLP idle and
#                                under 15 best-effort workers (wait and async),
#                                with --device-be-inflight 4, 2 and 0, and
#                                per-process torch under MPS beside it
#   bash tests/gpu/quick.sh S    one short lease (under 10 minutes): A's build,
#                                kernels, backend and GPU python tests, then C
#                                cut down (bounds 4 and 0, 4 s phases, torch
#                                without MPS)
# First, on this machine: bash tests/gpu/prepare.sh (makes .deps/gpu and .whl,
# which a fresh checkout lacks and the GPU machine cannot fetch).
# Outputs in $OUT (at most 8 files come back); the key lines are printed.
# tests/gpu/run.sh is the whole suite (MPS, poison drills, async orders).
set -u
part=${1:?usage: quick.sh A|B|C|S}
out=${OUT:-/tmp/opd-quick}
mkdir -p "$out"
export NVCC_ARCH=${NVCC_ARCH:-"-gencode arch=compute_90,code=sm_90"} PYTHONUNBUFFERED=1
# shellcheck source=bench/lib.sh
. bench/lib.sh
deps=$(opd_deps)
T0=$(date +%s)
el() { echo "[t=$(($(date +%s) - T0))s] $*"; }
sock=/tmp/opd-quick.sock
export OPD_BIN=$PWD/build/opd OPD_LIB=$PWD/build/libopd.so PYTHONPATH=$PWD/python OPD_SOCKET=$sock
nvidia-smi -L
if [ "$part" = A ] || [ "$part" = S ]; then
  # shellcheck disable=SC2086  # deps: make's DEPS=... or nothing
  make -j"$(nproc)" CUDA=1 BLAS=0 BENCH=1 $deps build/opd build/opctl build/tests/daemon_gpu \
    build/tests/graph_gpu build/tests/strided_gpu build/tests/gpu_kernels build/libopd.so \
    build/bench/bench_graph >"$out/build.log" 2>&1 || { tail -n 40 "$out/build.log"; exit 1; }
  el built
  timeout 150 build/tests/gpu_kernels >"$out/kernels.txt" 2>&1; el "gpu_kernels rc=$?"
  grep -E "FAIL" "$out/kernels.txt" | head -n 40; tail -n 2 "$out/kernels.txt"
  opd_up "$sock" /tmp/opd-quick.log build/opd --socket "$sock" --log-level info \
    --max-arena-bytes 4398046511104 --max-session-bytes 4398046511104 || exit 1
  { timeout 60 build/tests/daemon_gpu "$sock"; echo "daemon_gpu rc=$?"
    timeout 60 build/tests/graph_gpu "$sock"; echo "graph_gpu rc=$?"
    timeout 60 build/tests/strided_gpu "$sock"; echo "strided_gpu rc=$?"; } >"$out/backend.txt" 2>&1
  el backend; grep -E "FAIL|rc=|passed|error" "$out/backend.txt" | head -n 40
  timeout 130 python3 -m pytest -q -p no:cacheprovider -rs tests/python/test_gpu_model_ops.py \
    tests/python/test_gpu_reduce_ops.py tests/python/test_strided_gpu.py tests/python/test_gpu.py \
    tests/python/test_gpu_async.py tests/python/test_gpu_float64.py >"$out/pytest.txt" 2>&1
  el "pytest rc=$?"; grep -E "FAILED|Error|passed|failed" "$out/pytest.txt" | head -n 30
  if [ "$part" = S ]; then
    opd_down; tail -n 3 /tmp/opd-quick.log
    timeout 260 python3 bench/bench_latency_gpu.py --latency mlp --calls 2000 --workers 15 \
      --seconds 4 --config "--device-be-inflight 4;--device-be-inflight 0" --torch \
      >"$out/latency.txt" 2>&1
    el "latency rc=$?"; grep -vE "^#" "$out/latency.txt" | tail -n 30
    exit 0
  fi
  timeout 150 python3 -m pytest -q -p no:cacheprovider tests/torch2 \
    --deselect tests/torch2/test_conformance.py >"$out/torch2.txt" 2>&1
  el "torch2 rc=$?"; grep -E "FAILED|passed|failed" "$out/torch2.txt" | head -n 30
  timeout 110 python3 bench/bench_compile.py --socket "$sock" --model gpt2 --device cuda \
    --shapes 1x16,4x256 -n 20 >"$out/compile.txt" 2>&1
  el "compile rc=$?"; tail -n 25 "$out/compile.txt"
  opd_down; tail -n 5 /tmp/opd-quick.log
  exit 0
fi
if [ "$part" = C ]; then
  timeout 560 python3 bench/bench_latency_gpu.py --latency mlp --calls 3000 --workers 15 \
    --seconds 5 --config "--device-be-inflight 4;--device-be-inflight 2;--device-be-inflight 0" \
    --torch --mps >"$out/latency.txt" 2>&1
  el "latency rc=$?"; grep -vE "^#" "$out/latency.txt" | tail -n 40
  exit 0
fi
opd_up "$sock" /tmp/opd-quick-b.log build/opd --socket "$sock" || exit 1
timeout 100 python3 bench/bench_graph.py --socket "$sock" --device cuda -n 2000 >"$out/graph.txt" 2>&1
el "bench_graph rc=$?"; grep -E "^ratio" "$out/graph.txt" | head -n 20
OPD_WAIT=spin timeout 40 build/bench/bench_graph --socket "$sock" --device cuda -n 5000 2>&1 |
  grep -E "transport|case=graph_(prepared|dev) " | tee -a "$out/graph.txt"
timeout 60 python3 bench/bench_sdpa.py -n 50 >"$out/sdpa.txt" 2>&1
el "sdpa rc=$?"; grep -v "^#" "$out/sdpa.txt" | tail -n 20
opd_down
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/*.whl >/dev/null 2>&1
  PYTHONPATH=$PYTHONPATH:/tmp/site timeout 150 python3 bench/bench_dask.py --device cuda \
    --workers 1,8 --rows 128000 --block 4000 --repeat 2 >"$out/dask.txt" 2>&1
  el "dask rc=$?"; tail -n 8 "$out/dask.txt"
fi
if mps_start /tmp/opd-quick-mps; then
  opd_up "$sock" /tmp/opd-quick-mps.log build/opd --socket "$sock" || exit 1
  { OPD_WAIT=spin timeout 40 build/bench/bench_graph --socket "$sock" --device cuda -n 5000 2>&1 |
      grep -E "transport|case=graph_(prepared|dev) "
    timeout 110 python3 bench/bench_compile.py --socket "$sock" --model gpt2 --device cuda \
      --shapes 1x16,4x256 -n 20 2>&1 | tail -n 25; } >"$out/mps.txt" 2>&1
  el mps; cat "$out/mps.txt"
  opd_down; mps_stop
fi
