#!/usr/bin/env bash
# models.sh: the GPU machine's real-model run: builds the
# daemon and libopd with CUDA, starts a private daemon, runs
# bench/bench_models.py (GPT-2 and ResNet-18 through torch.ops.opd against
# torch's own forward) and bench/bench_chain.py (8 dependent tiny ops, one
# sync), and keeps what they print and their --json figures in OUTDIR.
#   bash bench/models.sh [OUTDIR] [-- BENCH_MODELS_ARGS...]
# OUTDIR defaults to $OUT or /tmp/opd-models; NVCC_ARCH to sm_90;
# BUILD=0 skips the build (build/opd, build/opctl, build/libopd.so must be
# there). Exit status: 1 when the build, the daemon or either benchmark
# failed (a benchmark fails on a result that differs from torch's).
set -uo pipefail
out=${OUT:-/tmp/opd-models}
if [ $# -gt 0 ] && [ "$1" != "--" ]; then out=$1; shift; fi
[ "${1:-}" = "--" ] && shift
mkdir -p "$out"
. "$(dirname "$0")/lib.sh"
arch=${NVCC_ARCH:--gencode arch=compute_90,code=sm_90}
status=0

echo "== machine"; nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'
python3 -c 'import transformers; print("transformers", transformers.__version__)' 2>&1 | tail -n 1
python3 -c 'import torchvision; print("torchvision", torchvision.__version__)' 2>&1 | tail -n 1
if [ "${BUILD:-1}" != 0 ]; then
  echo "== build"
  t0=$(date +%s)
  make -j"$(nproc)" CUDA=1 BLAS=0 $(opd_deps) NVCC_ARCH="$arch" build/opd build/opctl \
    build/libopd.so >"$out/build.log" 2>&1 ||
    { tail -n 40 "$out/build.log"; exit 1; }
  echo "built in $(( $(date +%s) - t0 )) s"
fi

sock=$(mktemp -u /tmp/opd-models.XXXXXX.sock)
opd_up "$sock" "$out/opd.log" build/opd --socket "$sock" || exit 1
run() {
  OPD_SOCKET=$sock OPD_LIB=$PWD/build/libopd.so PYTHONUNBUFFERED=1 "$@"
}
echo "== bench_models (GPT-2, ResNet-18 through torch.ops.opd vs torch)"
run timeout 400 python3 bench/bench_models.py --json "$out/models.json" "$@" \
  2>&1 | tee "$out/models.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
echo "== bench_chain (8 dependent tiny ops, one sync)"
run timeout 120 python3 bench/bench_chain.py --json "$out/chain.json" \
  2>&1 | tee "$out/chain.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
opd_down; st=$?
echo "opd exit status $st"
[ "$st" = 0 ] || { status=1; tail -n 20 "$out/opd.log"; }
grep -iE "error|fault" "$out/opd.log" | head -n 5
exit $status
