#!/usr/bin/env bash
# opd installed like a package, in a scratch root:
#   install   `make install DESTDIR=... PREFIX=/usr`: every file in place,
#             the unit's and the script's paths substituted, the unit's
#             systemd-analyze security exposure <= 2.0, opd --check-config
#             passes on the installed opd.conf, the README's C example
#             compiles with pkg-config against the installed libopd and
#             runs, the installed Python package imports and connects
#   sysv      the installed SysV script, as root: start, start again,
#             status, reload (the log says so), restart, stop, stop again,
#             status of a stopped (3) and of a killed daemon (1), a bad
#             option (6, the error shown), a bad action (2)
# Prints "name: ok" or "name: FAILED ..." per check and a last line
# "service: N passed, N failed". Env: OPD_BUILD (build dir).
set -u
B=${OPD_BUILD:-build}
cd "$(dirname "$0")/../.."
passed=0 failed=0
ok() { echo "$1: ok"; passed=$((passed + 1)); }
bad() { echo "$1: FAILED: $2"; failed=$((failed + 1)); }
check() { # name, command...
  local name=$1; shift
  local out
  if out=$("$@" 2>&1); then ok "$name"; else bad "$name" "$(echo "$out" | tail -n 5)"; fi
}

root=$(mktemp -d /tmp/opd-install.XXXXXX)
chmod 755 "$root"
trap 'rm -rf "$root"' EXIT

# ---- install ----------------------------------------------------------------
if ! out=$(make --no-print-directory -s B="$B" install DESTDIR="$root" PREFIX=/usr 2>&1); then
  bad "install: make install" "$(echo "$out" | tail -n 10)"
  echo "service: $passed passed, $failed failed"; exit 1
fi
missing=""
for f in usr/bin/opd usr/bin/opctl usr/lib/libopd.so.0 usr/lib/libopd.so usr/lib/libopd.a \
         usr/include/opd/opd.h usr/include/opd/protocol.h usr/lib/pkgconfig/opd.pc \
         usr/lib/python3/dist-packages/opd/__init__.py usr/lib/systemd/system/opd.service \
         etc/init.d/opd etc/default/opd etc/opd/opd.conf etc/logrotate.d/opd usr/share/man/man8/opd.8 \
         usr/share/man/man5/opd.conf.5 usr/share/man/man1/opctl.1; do
  [ -e "$root/$f" ] || missing="$missing $f"
done
[ -z "$missing" ] && ok "install: files in place" || bad "install: files in place" "missing:$missing"
unit=$root/usr/lib/systemd/system/opd.service
grep -q '^ExecStart=/usr/bin/opd --socket /run/opd/opd.sock' "$unit" && \
  grep -q '^ExecStart=/usr/bin/opd' "$unit" && grep -q '^#!/bin/sh' "$root/etc/init.d/opd" && \
  grep -q '^DAEMON=${DAEMON:-/usr/bin/opd}' "$root/etc/init.d/opd" && ! grep -q '@[A-Z]*@' "$unit" "$root/etc/init.d/opd" \
  && ok "install: paths substituted" || bad "install: paths substituted" "$(grep -n 'opd --socket\|@' "$unit" "$root/etc/init.d/opd")"
if command -v systemd-analyze >/dev/null; then
  score=$(systemd-analyze security --offline=true "$unit" 2>/dev/null | sed -n 's/.*exposure level for opd.service: \([0-9.]*\).*/\1/p')
  awk -v s="${score:-99}" 'BEGIN { exit !(s <= 2.0) }' && ok "install: unit exposure $score <= 2.0" \
    || bad "install: unit exposure" "systemd-analyze security says ${score:-nothing}"
else
  echo "install: unit exposure: skipped (no systemd-analyze)"
fi
check "install: opd --check-config on the installed opd.conf" \
  "$root/usr/bin/opd" --config "$root/etc/opd/opd.conf" --check-config
# the README's C example, built as an installed user would
sed -n '/^```c$/,/^```$/p' README.md | sed '1d;$d' > "$root/app.c"
sock=$root/opd.sock
"$root/usr/bin/opd" --socket "$sock" --config "$root/etc/opd/opd.conf" 2>"$root/opd.log" &
dpid=$!
for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
export PKG_CONFIG_PATH=$root/usr/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$root
if out=$(cc -Wall -Werror "$root/app.c" -o "$root/app" $(pkg-config --cflags --libs opd) 2>&1) &&
   out=$(OPD_SOCKET=$sock LD_LIBRARY_PATH=$root/usr/lib "$root/app" 2>&1); then
  ok "install: README C example builds with pkg-config and runs ($out)"
else
  bad "install: README C example" "$out"
fi
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
check "install: the Python package imports and pings" env PYTHONPATH="$root/usr/lib/python3/dist-packages" \
  OPD_LIB="$root/usr/lib/libopd.so.0" OPD_SOCKET="$sock" /usr/bin/python3 -c \
  'import opd; c = opd.connect(); c.ping(); print(opd.__file__)'
kill "$dpid"; wait "$dpid" 2>/dev/null

# ---- clients find the system socket -------------------------------------------
# In a mount namespace of our own with a private /run, a root daemon on
# /run/opd/opd.sock (0660 root:root, in a 0750 directory): a user with
# $XDG_RUNTIME_DIR set still finds it, is told "permission denied (not in
# group root?)" and `opctl health` exits 3; the same user in group root
# (as one added to group opd would be) connects (exit 0), and so does
# the Python package, whose socket_path() names it.
cat > "$root/ns.sh" <<EOF
set -u
mount -t tmpfs -o mode=755 tmpfs /run || exit 77
"$root/usr/bin/opd" --socket /run/opd/opd.sock --devices none 2>"$root/ns.log" &
for _ in \$(seq 50); do [ -S /run/opd/opd.sock ] && break; sleep 0.1; done
as() { setpriv --reuid nobody --regid \$(id -g nobody) "\$@"; }
unset OPD_SOCKET
export XDG_RUNTIME_DIR=$root/xdg
as --clear-groups "$root/usr/bin/opctl" health; echo "rc=\$?"
as --groups 0 "$root/usr/bin/opctl" health; echo "rc=\$?"
as --groups 0 env PYTHONPATH="$root/usr/lib/python3/dist-packages" OPD_LIB="$root/usr/lib/libopd.so.0" \
  /usr/bin/python3 -c 'import opd; c = opd.connect(); c.ping(); print("python:", opd.socket_path())'
kill \$!; wait \$!
EOF
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null && command -v setpriv >/dev/null &&
   unshare --mount --propagation private true 2>/dev/null; then
  out=$(unshare --mount --propagation private sh "$root/ns.sh" 2>&1)
  echo "$out" | grep -q '^permission denied: cannot connect to the opd daemon at /run/opd/opd.sock: permission denied (not in group root?' &&
    echo "$out" | grep -q '^rc=3$' && ok "paths: a user outside the group finds /run/opd/opd.sock, told permission denied (3)" \
    || bad "paths: permission denied" "$out"
  echo "$out" | grep -q '^healthy: opd at /run/opd/opd.sock' && echo "$out" | grep -q '^rc=0$' &&
    ok "paths: a user in the group finds /run/opd/opd.sock ahead of \$XDG_RUNTIME_DIR" || bad "paths: in the group" "$out"
  echo "$out" | grep -q '^python: /run/opd/opd.sock$' && ok "paths: Python finds it too" || bad "paths: Python" "$out"
else
  echo "paths: skipped (needs root, unshare and setpriv)"
fi

# ---- the SysV script -----------------------------------------------------------
if [ "$(id -u)" != 0 ] || ! command -v start-stop-daemon >/dev/null; then
  echo "sysv: skipped (needs root and start-stop-daemon)"
  echo "service: $passed passed, $failed failed"; [ $failed = 0 ]; exit
fi
user=nobody group=$(id -gn nobody)
run=$root/run
mkdir -p "$run"
cat > "$root/defaults" <<EOF
OPD_USER=$user
OPD_GROUP=$group
OPD_LOG=$root/opd-sysv.log
OPD_OPTS="--config $root/etc/opd/opd.conf --devices none"
EOF
initd() { # action: exit status, output in $out
  out=$(DAEMON=$root/usr/bin/opd OPDCTL=$root/usr/bin/opctl OPD_DEFAULTS=$root/defaults \
        RUNDIR=$run/opd sh "$root/etc/init.d/opd" "$1" 2>&1)
}
expect() { # name, want status, action [grep]
  initd "$3"; local rc=$?
  if [ $rc = "$2" ] && { [ -z "${4:-}" ] || echo "$out" | grep -q -- "$4"; }; then ok "sysv: $1"
  else bad "sysv: $1" "exit $rc (want $2): $out"; fi
}
expect "status of a stopped daemon is 3" 3 status "not running"
expect "start" 0 start
pid=$(cat "$run/opd/opd.pid" 2>/dev/null)
[ -n "$pid" ] && [ "$(stat -c %U "/proc/$pid")" = "$user" ] && ok "sysv: runs as $user, pid file $pid" \
  || bad "sysv: runs as $user" "pid '$pid'"
expect "start again is 0" 0 start "already running"
expect "status of a running daemon is 0" 0 status "healthy"
# as logrotate does (create 0640 opd opd, then postrotate: reload)
mv "$root/opd-sysv.log" "$root/opd-sysv.log.1"
install -m 0640 -o "$user" -g "$group" /dev/null "$root/opd-sysv.log"
expect "reload" 0 reload
for _ in $(seq 50); do grep -q "configuration reloaded" "$root/opd-sysv.log" 2>/dev/null && break; sleep 0.1; done
grep -q "configuration reloaded" "$root/opd-sysv.log" 2>/dev/null && ok "sysv: reload reopened the log and reloaded" \
  || bad "sysv: reload reopened the log" "$(cat "$root/opd-sysv.log" 2>&1 | tail -3)"
expect "restart" 0 restart
npid=$(cat "$run/opd/opd.pid" 2>/dev/null)
[ -n "$npid" ] && [ "$npid" != "$pid" ] && ok "sysv: restart made a new daemon" || bad "sysv: restart" "pid $pid -> $npid"
expect "stop" 0 stop
[ ! -e "$run/opd/opd.pid" ] && [ ! -e "$run/opd/opd.sock" ] && ok "sysv: stop removed pid file and socket" \
  || bad "sysv: stop removed pid file and socket" "$(ls -la "$run/opd")"
[ ! -e "$run/opd" ] && ok "sysv: stop removed the empty runtime directory" \
  || bad "sysv: stop removed the empty runtime directory" "$(ls -la "$run/opd")"
expect "stop again is 0" 0 stop
expect "reload of a stopped daemon is 7" 7 reload
expect "start after stop" 0 start
kill -9 "$(cat "$run/opd/opd.pid")"; sleep 0.2
expect "status of a killed daemon is 1" 1 status "dead, but its pid file"
rm -f "$run/opd/opd.sock"
sed -i 's/--devices none/--max-clients lots/' "$root/defaults"
expect "a bad option: start is 6 and says why" 6 start "max-clients expects a number"
expect "a bad action is 2" 2 frobnicate "Usage:"
initd stop >/dev/null
echo "service: $passed passed, $failed failed"
[ $failed = 0 ]
