#!/usr/bin/env bash
# Runs every test binary `make test` built and prints one closing line:
#   "N passed, N failed"
# Env: OPD_BIN (daemon under test), OPD_BUILD (build dir).
set -u
B=${OPD_BUILD:-build}
export OPD_BIN=${OPD_BIN:-$B/opd}
passed=0 failed=0 status=0

run_criterion() { # name binary
  local out tmp
  echo "== $1"
  # through a file, not a pipe: a process a failed test left behind (a
  # daemon it forked) cannot hold the run open by keeping the pipe
  tmp=$(mktemp /tmp/opd-run.XXXXXX)
  "$2" --jobs 2 >"$tmp" 2>&1; local rc=$?
  out=$(cat "$tmp"); rm -f "$tmp"
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

# The tree's shape (tests/arch): no object file calls into one that calls
# back, over the objects linked into the daemon (daemon, kernels, common)
# and into libopd (client, common), as this build linked them (make test
# passes OPD_DAEMON_OBJ and OPD_CLIENT_OBJ; alone: every object under
# $B/obj/daemon, $B/obj/kernels, $B/obj/common and $B/obj/client); no
# import cycle in the Python package; no source file over 600 lines.
arch() { # name command...
  echo "== architecture: $1"
  shift
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); status=1; fi
}
objs_under() { find "$@" -name '*.o' 2>/dev/null | sort; }
arch "the checks' own self-tests" sh -c '/usr/bin/python3 tests/arch/no_cycles.py --self-test &&
  /usr/bin/python3 tests/arch/request_path.py --self-test'
arch "no call cycles in the daemon's objects (daemon, kernels, common)" \
  /usr/bin/python3 tests/arch/no_cycles.py \
  ${OPD_DAEMON_OBJ:-$(objs_under $B/obj/daemon $B/obj/kernels $B/obj/common)}
arch "no call cycles in libopd's objects (client, common)" \
  /usr/bin/python3 tests/arch/no_cycles.py \
  ${OPD_CLIENT_OBJ:-$(objs_under $B/obj/client $B/obj/common)}
arch "no import cycles in the Python package (tests/arch/py_imports.py)" sh -c \
  '/usr/bin/python3 tests/arch/py_imports.py --self-test && /usr/bin/python3 tests/arch/py_imports.py python/opd'
arch "no source file over 600 lines" /usr/bin/python3 tests/arch/no_cycles.py \
  --max-lines 600 daemon client kernels common include python tests bench examples
# one CPU run traced from Python to the kernel and back (a TRACE=1 build in
# $B/trace): each thread enters each file once, bar the design's callbacks
# (tests/arch/request_path.py)
arch "one CPU run from Python to the kernel and back (make trace)" \
  make --no-print-directory -s B="$B" trace

run_criterion "unit: framing, msgpack, descriptors, rings" "$B/tests/unit"
run_criterion "ops: every CPU operator against its reference" "$B/tests/ops"
# Both transports pass the whole suite: the integration and Python suites
# run once per wait strategy (OPD_WAIT: libopd's transport).
for wait in adaptive socket spin; do
  OPD_WAIT=$wait run_criterion "integration over $wait: a real daemon through libopd" \
    "$B/tests/integration"
done

# The Python package against a real daemon (Debian's python3: numpy, pytest).
run_pytest() { # [python [tests dir]]
  local py=${1:-/usr/bin/python3} dir=${2:-tests/python}
  echo "== python over ${OPD_WAIT:-adaptive}: the opd package (pytest $dir, $py)"
  local out rc
  local tmp
  tmp=$(mktemp /tmp/opd-run.XXXXXX)   # a file, as in run_criterion
  OPD_LIB=${OPD_LIB:-$B/libopd.so} "$py" -m pytest -q -p no:cacheprovider \
    "$dir" >"$tmp" 2>&1; rc=$?
  out=$(cat "$tmp"); rm -f "$tmp"
  echo "$out" | grep -E '^(FAILED|ERROR)|passed|failed|error' | tail -n 40
  local line p f e
  line=$(echo "$out" | grep -E '^=*.*[0-9]+ (passed|failed|error)' | tail -n 1)
  if [ -z "$line" ]; then
    echo "$out" | tail -n 30
    echo "python: no pytest summary (exit $rc)"
    failed=$((failed + 1)); status=1; return
  fi
  p=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || echo 0)
  f=$(echo "$line" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+' || echo 0)
  e=$(echo "$line" | grep -oE '[0-9]+ error' | grep -oE '[0-9]+' || echo 0)
  passed=$((passed + p)); failed=$((failed + f + e))
  [ "$rc" = 0 ] || status=1
}
for wait in adaptive socket spin; do OPD_WAIT=$wait run_pytest; done

# opd under Dask (tests/dask): two emulated nodes, a LocalCluster of
# worker processes, daemons killed mid-job (Debian's python3-dask and
# python3-distributed; skipped, saying so, where they are not importable).
if /usr/bin/python3 -c 'import dask.array, distributed' 2>/dev/null; then
  run_pytest /usr/bin/python3 tests/dask
else
  echo "== dask (tests/dask): python3-dask / python3-distributed not importable; skipped (make deps)"
fi

# The torch.compile backend (tests/torch2) needs torch >= 2.4, which Debian
# does not ship: run with the venv DEVELOPERS.md makes ($OPD_TORCH_VENV,
# default $B/venv-torch; .ci/run makes it) when it is there. A venv whose
# torch is older fails the step rather than skipping it unseen.
TORCH_VENV=${OPD_TORCH_VENV:-$B/venv-torch}
if [ -x "$TORCH_VENV/bin/python" ]; then
  if PYTHONPATH=python "$TORCH_VENV/bin/python" -c \
       'import sys, opd.dynamo as d; sys.exit(d.why_not() is not None)'; then
    run_pytest "$TORCH_VENV/bin/python" tests/torch2
  else
    echo "== torch >= 2.4 (tests/torch2): $TORCH_VENV has no usable torch:"
    PYTHONPATH=python "$TORCH_VENV/bin/python" -c 'import opd.dynamo as d; print(d.why_not())'
    failed=$((failed + 1)); status=1
  fi
else
  echo "== torch >= 2.4 (tests/torch2): no venv at $TORCH_VENV; skipped (DEVELOPERS.md)"
fi

# fuzzing: each libFuzzer target (tests/fuzz) for a bounded time on a copy
# of its seed corpus; one pass or failure per target. Needs clang and
# libFuzzer (Debian: clang libclang-rt-14-dev); without them it says so and
# fails. OPD_FUZZ_SECONDS sets the time per target (default 20).
run_fuzz() {
  local secs=${OPD_FUZZ_SECONDS:-20} out rc p f
  echo "== fuzz: msgpack decoder, descriptors, whole sessions (libFuzzer, $secs s each)"
  out=$(make --no-print-directory -s -j2 B="$B" fuzz FUZZ_SECONDS="$secs" 2>&1); rc=$?
  echo "$out" | grep -vE '^opd: CC=' | tail -n 30
  p=$(echo "$out" | grep -cE '^fuzz_[a-z]+: .*; no crash$')
  f=$(echo "$out" | grep -cE '^fuzz_[a-z]+: .*; FAILED')
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
    echo "fuzz: the targets did not build or run (exit $rc)"
    f=1
  fi
  passed=$((passed + p)); failed=$((failed + f))
  [ "$rc" = 0 ] && [ "$f" = 0 ] || status=1
}
run_fuzz

# chaos: clients SIGKILLed mid-work, floods, unread replies, half frames, a
# low fd limit, each against a daemon of its own and measured from its
# /proc (tests/chaos). Once, not per transport: the cases choose theirs.
run_criterion "chaos: kills, floods, unread replies, fd exhaustion (the daemon's /proc)" \
  "$B/tests/chaos"

# installed like a package (tests/service/run.sh): make install into a
# scratch root, the unit's hardening score, the README's C example built
# with pkg-config, the SysV script's LSB codes (as root)
run_service() {
  echo "== service: make install layout, unit, README example, SysV script"
  local out p f tmp
  tmp=$(mktemp /tmp/opd-run.XXXXXX)   # a file, as in run_criterion
  OPD_BUILD="$B" bash tests/service/run.sh >"$tmp" 2>&1
  out=$(cat "$tmp"); rm -f "$tmp"
  echo "$out" | grep -v ': ok$'
  p=$(echo "$out" | grep -c ': ok$')
  f=$(echo "$out" | grep -c ': FAILED')
  if ! echo "$out" | grep -q '^service: '; then f=$((f + 1)); fi
  passed=$((passed + p)); failed=$((failed + f))
  [ "$f" = 0 ] || status=1
}
run_service

echo
echo "$passed passed, $failed failed"
exit $status
