#!/usr/bin/env bash
# The .deb of `make deb` (CI, after the tests): its files unpacked into a
# scratch root (dpkg -x) and checked, and `opd --check-config` on its
# opd.conf; with OPD_DEB_INSTALL=1 and root, also installed for real
# (apt-get install of the .deb: the opd user and group made, the service started by its init
# script where systemd is not running), `opctl health` answers 0 on
# /run/opd/opd.sock, and purged. Not in `make test`: it builds the
# package (~30 s) and the real install touches /etc and /run.
set -euo pipefail
B=${OPD_BUILD:-build}
deb=$(ls "$B"/deb/opd_*_*.deb | grep -v dbgsym | head -n 1)
root=$(mktemp -d /tmp/opd-deb.XXXXXX)
trap 'rm -rf "$root"' EXIT
dpkg -x "$deb" "$root"
for f in usr/bin/opd usr/bin/opctl usr/lib/libopd.so.0 usr/include/opd/opd.h \
         usr/lib/pkgconfig/opd.pc usr/lib/python3/dist-packages/opd/__init__.py \
         lib/systemd/system/opd.service etc/init.d/opd etc/default/opd \
         etc/opd/opd.conf usr/share/man/man8/opd.8.gz usr/share/man/man5/opd.conf.5.gz \
         usr/share/man/man1/opctl.1.gz; do
  [ -e "$root/$f" ] || { echo "deb: $f missing from $deb"; exit 1; }
done
grep -q '^ExecStart=/usr/bin/opd ' "$root/lib/systemd/system/opd.service"
grep -q '^Type=notify' "$root/lib/systemd/system/opd.service"
"$root/usr/bin/opd" --config "$root/etc/opd/opd.conf" --check-config >/dev/null
echo "deb: $(basename "$deb"): files in place, opd --check-config passes"
if [ "${OPD_DEB_INSTALL:-0}" = 1 ] && [ "$(id -u)" = 0 ]; then
  # apt, not dpkg -i: it installs the package's dependencies too (the
  # libopenblas0 its shlibs name, which a machine with only the -dev
  # package's flavour lacks)
  apt-get install -y -qq --no-install-recommends "$(realpath "$deb")" >/dev/null
  getent passwd opd >/dev/null && getent group opd >/dev/null
  opd --check-config >/dev/null
  for _ in $(seq 50); do opctl health >/dev/null 2>&1 && break; sleep 0.1; done
  # a policy-rc.d (containers) may have kept the maintainer script from
  # starting it: start it by hand then
  by_hand=0
  if ! opctl health >/dev/null 2>&1 && [ ! -d /run/systemd/system ]; then
    /etc/init.d/opd start
    by_hand=1
  fi
  opctl health
  [ -d /run/systemd/system ] && systemctl --no-pager status opd || /etc/init.d/opd status
  # what was started by hand is stopped by hand: the same policy-rc.d keeps
  # the package's prerm from stopping it
  [ $by_hand = 0 ] || /etc/init.d/opd stop
  dpkg --purge opd
  [ ! -e /run/opd ] || { echo "deb: /run/opd left after purge: $(ls -la /run/opd)"; exit 1; }
  [ ! -e /var/log/opd.log ] || { echo "deb: /var/log/opd.log left after purge"; exit 1; }
  echo "deb: installed (user and group opd made, service answered), purged"
fi
