#!/usr/bin/env bash
# The GPU machine's plugin run: build the daemon, libopd and the
# example plugins with CUDA, check the plugins' CUDA kernels through the
# daemon and as torch ops (pytest: tests/python/test_torch_ops.py and
# test_plugins.py, torch >= 2.4 there), then the benchmarks: the fused
# conv3x3_bias_relu plugin against opd conv2d + relu (bench_plugins -d cuda)
# and torch.ops.opd.* against torch (bench/bench_torch_ops.py), and where a
# torch.ops.opd call spends its time (bench/profile_torch_ops.py).
#   bash tests/gpu/plugins.sh [OUTDIR]
# NVCC_ARCH defaults to sm_90 only to keep the build short.
set -uo pipefail
out=${1:-${OUT:-/tmp/opd-gpu}}
mkdir -p "$out"
. "$(dirname "$0")/../../bench/lib.sh"
arch=${NVCC_ARCH:--gencode arch=compute_90,code=sm_90}
status=0

echo "== machine"; nvidia-smi -L; nvcc --version | tail -n 1; python3 -c 'import torch; print("torch", torch.__version__)'
echo "== build"
t0=$(date +%s)
make -j"$(nproc)" CUDA=1 BLAS=0 $(opd_deps) NVCC_ARCH="$arch" build/opd build/opctl \
  build/libopd.so build/bench/bench_plugins plugins >"$out/build.log" 2>&1 ||
  { tail -n 40 "$out/build.log"; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"; grep -E "warning" "$out/build.log" | head -n 5

sock=/tmp/opd-plugins.sock
opd_up "$sock" "$out/opd.log" build/opd --socket "$sock" --plugin build/plugins/hello.so \
  --plugin build/plugins/conv3x3_bias_relu.so || exit 1
echo "== opctl plugins"; build/opctl --socket "$sock" plugins
echo "== fused conv3x3_bias_relu vs opd conv2d + relu (CUDA, device memory)"
timeout 120 build/bench/bench_plugins -d cuda -n 100 "$sock" || status=1
echo "== torch.ops.opd.* against torch"
OPD_SOCKET=$sock OPD_LIB=$PWD/build/libopd.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 \
  timeout 150 python3 bench/bench_torch_ops.py -n 200 || status=1
echo "== where a torch.ops.opd call spends its time (profile_torch_ops)"
OPD_SOCKET=$sock OPD_LIB=$PWD/build/libopd.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 \
  timeout 60 python3 bench/profile_torch_ops.py -n 1000 --top 10 || status=1
opd_down; echo "opd exit status $?"
grep -E "plugin|error" "$out/opd.log" | head -n 5

echo "== pytest: plugins and opd.torch (opcheck of every op, CPU and CUDA)"
OPD_BIN=$PWD/build/opd OPD_LIB=$PWD/build/libopd.so PYTHONPATH=$PWD/python \
  timeout 200 python3 -m pytest -q -p no:cacheprovider -rs tests/python/test_plugins.py \
  tests/python/test_torch_ops.py >"$out/pytest.txt" 2>&1 || status=1
tail -n 40 "$out/pytest.txt"
exit $status
