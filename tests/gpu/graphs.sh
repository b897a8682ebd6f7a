#!/usr/bin/env bash
# GPU machine: the graph benchmarks and the torch >= 2.4 tests on a GPU
# (docs/graphs.md), after tests/gpu/run.sh built the tree (or BUILD=1).
#
#   bash tests/gpu/graphs.sh OUTDIR
#
# Runs against one daemon: bench_graph.py on cuda (C and Python clients,
# torch eager and CUDA-graph replay in the same run, batch 1 and 32), the
# same from 16 processes (--procs 16), with and without MPS when
# nvidia-cuda-mps-control is there; tests/torch2 (the torch.compile
# backend) with the machine's torch; bench_compile.py (GPT-2 small under
# torch.compile(backend="opd") against eager). Each output in OUTDIR.
set -u
cd "$(dirname "$0")/../.."
out=${1:?usage: graphs.sh OUTDIR}
mkdir -p "$out"
. bench/lib.sh
deps=$(opd_deps)
make -j"$(nproc)" CUDA=1 BLAS=0 BENCH=1 $deps build/opd build/libopd.so build/bench/bench_graph \
  >"$out/build-graphs.log" 2>&1 || { tail -n 30 "$out/build-graphs.log"; exit 1; }
export OPD_LIB=$PWD/build/libopd.so PYTHONPATH=$PWD/python
sock=/tmp/opd-graphs.sock
start() {
  rm -f "$sock"
  build/opd --socket "$sock" --log-level info >>"$out/opd-graphs.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do [ -S "$sock" ] && return 0; sleep 0.1; done
  echo "opd did not start"; return 1
}
stop() { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }
nvidia-smi -L
start || exit 1
echo "== bench_graph, cuda, one process"
timeout 240 python3 bench/bench_graph.py --socket "$sock" --device cuda -n 3000 \
  >"$out/graph-cuda.txt" 2>&1
grep -E "^(ratio|graph)" "$out/graph-cuda.txt" | grep -E "ratio|graph_prepared|graph_dev |lang=torch" | head -n 30
echo "== bench_graph from C over spinning rings (the latency client's transport)"
OPD_WAIT=spin timeout 120 build/bench/bench_graph --socket "$sock" --device cuda -n 5000 \
  >"$out/graph-cuda-spin.txt" 2>&1
grep -E "transport|case=graph_(prepared|dev) " "$out/graph-cuda-spin.txt"
echo "== bench_graph, cuda, 16 processes"
timeout 120 python3 bench/bench_graph.py --socket "$sock" --device cuda --procs 16 --seconds 5 \
  >"$out/graph-cuda-procs.txt" 2>&1
grep -E "^(procs|ratio)" "$out/graph-cuda-procs.txt"
stop
echo "== the same under MPS (a private control daemon; opd and torch both clients of it)"
if mps_start "$out"; then
  start || exit 1
  timeout 240 python3 bench/bench_graph.py --socket "$sock" --device cuda -n 3000 \
    >"$out/graph-cuda-mps.txt" 2>&1
  grep -E "^ratio" "$out/graph-cuda-mps.txt" | grep -E "c_graph_(prepared|dev) |python_graph" | head -n 8
  OPD_WAIT=spin timeout 120 build/bench/bench_graph --socket "$sock" --device cuda -n 5000 \
    >"$out/graph-cuda-mps-spin.txt" 2>&1
  grep -E "case=graph_(prepared|dev) " "$out/graph-cuda-mps-spin.txt"
  timeout 120 python3 bench/bench_graph.py --socket "$sock" --device cuda --procs 16 --seconds 5 \
    >"$out/graph-cuda-mps-procs.txt" 2>&1
  grep -E "^(procs|ratio)" "$out/graph-cuda-mps-procs.txt"
  stop
  mps_stop
fi
start || exit 1
echo "== tests/torch2 on the GPU machine's torch"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/torch2 2>&1 | tail -n 5 | tee "$out/torch2.txt"
echo "== GPT-2 small under torch.compile(backend=\"opd\")"
timeout 300 python3 bench/bench_compile.py --socket "$sock" --model gpt2 --device cuda \
  --shapes 1x16,4x256 -n 30 >"$out/compile-gpt2.txt" 2>&1
grep -E "^(compile|#)" "$out/compile-gpt2.txt" | head -n 20
stop
