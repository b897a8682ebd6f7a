#!/usr/bin/env bash
# Runs libFuzzer targets for a bounded time each and prints one line per
# target: execs, exec/s, coverage (cov: edges, ft: features), corpus size,
# and whether it crashed. `make fuzz FUZZ_SECONDS=N` calls it.
#   usage: tests/fuzz/run.sh BUILD_FUZZ_DIR SECONDS TARGET...
# Each target runs on a fresh copy of tests/fuzz/corpus/<target> in
# BUILD_FUZZ_DIR/work/<target> (what it finds stays there, the tree's seeds
# are never written); a crash leaves its input in
# BUILD_FUZZ_DIR/artifacts/ (tests/fuzz/README.md: reproducing one).
# Exit status: 0 when no target crashed, leaked or timed out.
set -u
dir=$1 secs=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
status=0
mkdir -p "$dir/artifacts"
for t in "$@"; do
  bin=$dir/fuzz_$t
  work=$dir/work/$t
  log=$dir/fuzz_$t.log
  rm -rf "$work"
  mkdir -p "$work"
  cp "$here/corpus/$t/"* "$work/" 2>/dev/null || true
  dict=()
  [ -f "$here/$t.dict" ] && dict=(-dict="$here/$t.dict")
  # max_len: the seeds' largest is well under it; a session input holds
  # several frames
  case $t in session) max_len=8192 ;; *) max_len=4096 ;; esac
  "$bin" -max_total_time="$secs" -print_final_stats=1 -timeout=20 \
    -rss_limit_mb=4096 -max_len=$max_len -use_value_profile=1 \
    "${dict[@]}" -artifact_prefix="$dir/artifacts/$t-" "$work" >"$log" 2>&1
  rc=$?
  execs=$(grep -oE 'stat::number_of_executed_units: [0-9]+' "$log" | grep -oE '[0-9]+$')
  rate=$(grep -oE 'stat::average_exec_per_sec: +[0-9]+' "$log" | grep -oE '[0-9]+$')
  last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
  cov=$(echo "$last" | grep -oE 'cov: [0-9]+' | grep -oE '[0-9]+')
  ft=$(echo "$last" | grep -oE 'ft: [0-9]+' | grep -oE '[0-9]+')
  corp=$(echo "$last" | grep -oE 'corp: [0-9]+' | grep -oE '[0-9]+')
  if [ "$rc" = 0 ]; then
    verdict="no crash"
  else
    verdict="FAILED (exit $rc): see $log"
    status=1
  fi
  printf 'fuzz_%s: %s execs in %s s (%s exec/s), cov %s, ft %s, corpus %s; %s\n' \
    "$t" "${execs:-?}" "$secs" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" \
    "$verdict"
  if [ "$rc" != 0 ]; then
    grep -E 'ERROR|SUMMARY|check failed|runtime error|Test unit written' "$log" | head -n 8
  fi
done
exit $status
