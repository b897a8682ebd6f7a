#!/usr/bin/env bash
# Runs every test binary `make test` built and prints one closing line:
#   "N passed, N failed"
# Env: OPD_BIN (daemon under test), OPD_BUILD (build dir).
set -u
B=${OPD_BUILD:-build}
export OPD_BIN=${OPD_BIN:-$B/opd}
passed=0 failed=0 status=0

run_criterion() { # name binary
  local out
  echo "== $1"
  out=$("$2" --jobs 2 2>&1); local rc=$?
  echo "$out" | grep -v '^\[----\] *$' | grep -E '^\[(FAIL|----|====)\]' || true
  local line
  line=$(echo "$out" | grep 'Synthesis:' | tail -n 1)
  if [ -z "$line" ]; then
    echo "$out" | tail -n 20
    echo "$1: no test summary (exit $rc)"
    failed=$((failed + 1)); status=1; return
  fi
  local p f c
  p=$(echo "$line" | sed -E 's/.*Passing: ([0-9]+).*/\1/')
  f=$(echo "$line" | sed -E 's/.*Failing: ([0-9]+).*/\1/')
  c=$(echo "$line" | sed -E 's/.*Crashing: ([0-9]+).*/\1/')
  passed=$((passed + p)); failed=$((failed + f))
  [ "$rc" = 0 ] && [ "$f" = 0 ] && [ "$c" = 0 ] || status=1
}

run_criterion "unit: framing, msgpack, descriptors" "$B/tests/unit"
run_criterion "ops: every CPU operator against its reference" "$B/tests/ops"
run_criterion "integration: a real daemon through libopd" "$B/tests/integration"

echo
echo "$passed passed, $failed failed"
exit $status
