#!/usr/bin/env bash
# `make run`: start opd on a private socket, run the example workload
# against it, stop the daemon cleanly and report.
#   bash examples/run.sh BUILD_DIR
set -euo pipefail
B=${1:-build}
dir=$(mktemp -d /tmp/opd-run.XXXXXX)
sock=$dir/opd.sock
log=$dir/opd.log
pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT

echo "== starting opd on $sock"
"$B/opd" --socket "$sock" >"$log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  "$B/opctl" --socket "$sock" ping -c 1 >/dev/null 2>&1 && break
  if ! kill -0 "$pid" 2>/dev/null; then echo "opd exited during start:"; cat "$log"; exit 1; fi
  sleep 0.05
done
"$B/opctl" --socket "$sock" version

echo "== example workload: examples/softmax_conv.c"
"$B/examples/softmax_conv" "$sock"

echo "== four clients at once"
for i in 1 2 3 4; do "$B/examples/softmax_conv" "$sock" >"$dir/client$i.out" 2>&1 & done
fails=0
for job in $(jobs -p | grep -v "^$pid\$"); do wait "$job" || fails=$((fails + 1)); done
grep -h "all results match\|FAILED" "$dir"/client*.out | sort | uniq -c
[ "$fails" = 0 ] || { echo "$fails clients failed"; cat "$dir"/client*.out; exit 1; }

if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  echo "== Python: examples/multiprocess_workers.py (a Pool of workers on shared tensors)"
  OPD_LIB=$B/libopd.so /usr/bin/python3 examples/multiprocess_workers.py --socket "$sock" \
    --rows 2048 --rounds 2
fi

echo "== daemon statistics"
"$B/opctl" --socket "$sock" stats

echo "== stopping opd (SIGTERM)"
kill -TERM "$pid"
wait "$pid"; status=$?
pid=
tail -n 3 "$log"
[ -e "$sock" ] && { echo "socket file left behind"; exit 1; }
echo "opd stopped cleanly (exit $status); make run: OK"
