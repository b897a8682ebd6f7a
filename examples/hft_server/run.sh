#!/usr/bin/env bash
# run.sh: the hft_server example end to end. Starts opd on a private
# socket, the publisher (the weights, published once), N clients at once
# (C and Python), waits for them, prints their latency table, and stops
# everything.
#
#   bash examples/hft_server/run.sh [BUILD_DIR] [--requests R] [--device D]
#        [--c-clients N] [--py-clients N] [--seed S]
#
# DESIGN
# Everything lives in a fresh temp dir (socket, logs), so a daemon the
# user runs is never touched; the EXIT trap stops what is still running
# (clients, publisher, daemon, in that order) and removes the dir on every
# path. The publisher prints "published NAME" once its name can be
# attached; the clients start only then. Each client prints one line of
# key=value pairs; the table is those lines in columns. Exit status 0 only
# if every client ran and matched its reference and the daemon stopped
# cleanly.
set -euo pipefail
B=build
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then B=$1; shift; fi
requests=20000 device=cpu n_c=2 n_py=2 seed=42
usage() {
  echo "usage: run.sh [BUILD_DIR] [--requests R] [--device D] [--c-clients N]" \
       "[--py-clients N] [--seed S]" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage
  case $1 in
    --requests) requests=$2 ;;
    --device) device=$2 ;;
    --c-clients) n_c=$2 ;;
    --py-clients) n_py=$2 ;;
    --seed) seed=$2 ;;
    *) usage ;;
  esac
  shift 2
done
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
for f in "$B/opd" "$B/opctl" "$B/libopd.so" "$B/examples/hft_server/publisher" \
         "$B/examples/hft_server/client"; do
  [ -e "$f" ] || { echo "run.sh: $f is missing; build it first (make all)" >&2; exit 1; }
done
PY=${PYTHON:-/usr/bin/python3}
if [ "$n_py" -gt 0 ] && ! "$PY" -c 'import numpy' 2>/dev/null; then PY=python3; fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/opd-hft.XXXXXX")
sock=$dir/opd.sock
daemon= publisher= clients=()
cleanup() {
  for p in "${clients[@]}" $publisher $daemon; do
    if kill -0 "$p" 2>/dev/null; then kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; fi
  done
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "== opd on $sock"
"$B/opd" --socket "$sock" >"$dir/opd.log" 2>&1 &
daemon=$!
for _ in $(seq 1 100); do
  "$B/opctl" --socket "$sock" ping -c 1 >/dev/null 2>&1 && break
  kill -0 "$daemon" 2>/dev/null || { echo "opd exited during start:"; cat "$dir/opd.log"; exit 1; }
  sleep 0.05
done

echo "== publisher: the MLP's weights (seed $seed) on $device, published as hft_mlp"
"$B/examples/hft_server/publisher" --socket "$sock" --name hft_mlp --seed "$seed" \
  --device "$device" >"$dir/publisher.out" 2>&1 &
publisher=$!
for _ in $(seq 1 200); do
  grep -q '^published hft_mlp' "$dir/publisher.out" && break
  kill -0 "$publisher" 2>/dev/null || { echo "publisher failed:"; cat "$dir/publisher.out"; exit 1; }
  sleep 0.05
done
grep -q '^published hft_mlp' "$dir/publisher.out" || { echo "publisher did not publish in 10 s"; exit 1; }
head -n 1 "$dir/publisher.out"

echo "== $((n_c + n_py)) clients at once ($n_c C, $n_py Python), $requests requests each"
id=0
for _ in $(seq 1 "$n_c"); do
  id=$((id + 1))
  "$B/examples/hft_server/client" --socket "$sock" --name hft_mlp --id $id \
    --requests "$requests" --device "$device" >"$dir/client$id.out" 2>&1 &
  clients+=($!)
done
for _ in $(seq 1 "$n_py"); do
  id=$((id + 1))
  PYTHONPATH="$repo/python" OPD_LIB="$B/libopd.so" "$PY" "$here/client.py" --socket "$sock" \
    --name hft_mlp --id $id --requests "$requests" --device "$device" --seed "$seed" \
    >"$dir/client$id.out" 2>&1 &
  clients+=($!)
done
fails=0
for p in "${clients[@]}"; do wait "$p" || fails=$((fails + 1)); done
clients=()

echo
grep -h '^client ' "$dir"/client*.out | sort | awk '
  BEGIN { printf "%-6s %-7s %-16s %-7s %9s %9s %9s %9s %8s  %s\n", "client", "lang",
          "graph", "device", "requests", "p50 us", "p99 us", "p99.9 us", "checked", "result" }
  { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    printf "%-6s %-7s %-16s %-7s %9s %9s %9s %9s %8s  %s\n", v["name"], v["lang"], v["path"],
           v["device"], v["requests"], v["p50_us"], v["p99_us"], v["p999_us"], v["checked"],
           v["result"] }'
echo
if [ "$fails" != 0 ]; then
  echo "$fails client(s) failed:"
  for f in "$dir"/client*.out; do grep -q '^client .*result=ok' "$f" || { echo "--- $f"; cat "$f"; }; done
fi

kill -TERM "$publisher"; wait "$publisher" || fails=$((fails + 1)); publisher=
tail -n 1 "$dir/publisher.out"
kill -TERM "$daemon"; st=0; wait "$daemon" || st=$?; daemon=
[ "$st" = 0 ] || { echo "opd exited with status $st:"; tail -n 20 "$dir/opd.log"; exit 1; }
[ "$fails" = 0 ] || exit 1
echo "hft_server: all clients matched the reference; opd stopped cleanly"
