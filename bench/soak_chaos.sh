#!/usr/bin/env bash
# Soak run of the chaos tests (tests/chaos, OPD_CHAOS_SOAK=1): 10,000
# clients SIGKILLed while they hold arenas, rings and runs; 200,000 arena
# register/release loops; 48 sparse 64 GiB arenas and 32 x 1024 queued
# runs (as in `make test`); a session that never reads its replies (over
# its completion ring and over its socket). Prints, for each, the daemon's
# figures at the warmed-up baseline and after (fds, memfd mappings and
# their MiB, VmSize, VmRSS, RssShmem from /proc; sessions, arenas,
# bytes_mapped, mappings, mapped_bytes, inflight from its stats), the time
# taken, and the unread-replies memory bound; then criterion's verdicts.
#
#   bench/soak_chaos.sh [build-dir]     (default build; CUDA=0 etc. pass
#                                        through the environment to make)
#
# A run's output is kept as bench/results/<date>-soak.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
make --no-print-directory B="$B" "$B/opd" "$B/opctl" "$B/tests/chaos" >"$log" 2>&1 ||
  { cat "$log"; exit 1; }
echo "# opd chaos soak, $(date -u '+%Y-%m-%d %H:%M UTC'), commit" \
     "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "# machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' \
     /proc/meminfo), $(uname -sr)"
for t in sigkilled_clients_leave_nothing_behind \
         register_release_loop_keeps_no_mapping \
         sparse_arenas_give_back_address_space queued_runs_are_freed \
         unread_completion_ring_is_bounded unread_socket_is_bounded; do
  echo
  echo "\$ OPD_CHAOS_SOAK=1 OPD_BIN=$B/opd $B/tests/chaos --jobs 1 --filter chaos/$t"
  OPD_CHAOS_SOAK=1 OPD_BIN="$PWD/$B/opd" "$B/tests/chaos" --jobs 1 \
    --filter "chaos/$t" 2>&1 | grep -v '^\[----\] *$' || true
done
