#!/usr/bin/env bash
# Makes, on this (networked) machine, what the GPU machine cannot fetch
# itself and tests/gpu/quick.sh needs carried there (both ignored by git;
# docs/gpu.md, "Building and testing on the GPU machine"):
#   .deps/gpu   libuv and msgpack-c headers and archives from Debian's
#               packages (carry [".deps"])
#   .whl        dask, distributed and their pure-Python dependencies as
#               wheels for the GPU machine's Python 3.12, for bench_dask
#               --device cuda (carry [".deps", ".whl"])
# and lists both in .git/info/exclude. Usage: bash tests/gpu/prepare.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
for p in .deps/ .whl/; do grep -qxF "$p" "$exclude" 2>/dev/null || echo "$p" >>"$exclude"; done
if [ ! -f .deps/gpu/include/uv.h ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download libuv1-dev libmsgpack-dev libmsgpackc2 >/dev/null 2>&1)
  for f in "$tmp"/*.deb; do dpkg -x "$f" "$tmp/root"; done
  mkdir -p .deps/gpu/include .deps/gpu/lib
  cp -r "$tmp"/root/usr/include/{uv.h,uv,msgpack.h,msgpack} .deps/gpu/include/
  cp -P "$tmp"/root/usr/lib/x86_64-linux-gnu/{libuv_a.a,libmsgpackc.a,libmsgpackc.so*} .deps/gpu/lib/
  rm -rf "$tmp"
fi
echo "prepare: .deps/gpu: $(ls .deps/gpu/lib | tr '\n' ' ')"
if ! ls .whl/distributed-*.whl >/dev/null 2>&1; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl dask distributed partd locket tornado tblib zict
fi
echo "prepare: .whl: $(ls .whl | wc -l) wheels"
