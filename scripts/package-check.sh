#!/usr/bin/env bash
# Installs a stealgate .deb into this machine, checks what it installed, checks an upgrade
# in place keeps a locally edited conffile, then removes and purges it again:
#   scripts/package-check.sh dist/stealgate_<version>_<arch>.deb
# Needs root (uses sudo otherwise). Refuses to run where a stealgate package is already installed (it would be
# replaced and then purged). Whatever fails, the package is purged on the way out.
set -euo pipefail
deb="$1"
version=$(dpkg-deb --field "$deb" Version)
units=(stealgate.service stealgate.socket stealgate-admin.socket)
unitdir=/lib/systemd/system
conf=/etc/stealgate/stealgate.yaml

if [[ $(id -u) -ne 0 ]]; then exec sudo "$0" "$@"; fi
if dpkg-query -W -f='${Status}' stealgate 2>/dev/null | grep -q "installed"; then
  echo "package-check: a stealgate package is already installed here; not touching it" >&2
  exit 1
fi
trap 'dpkg --purge stealgate >/dev/null 2>&1 || true' EXIT

check() {  # description, command...
  local what="$1"
  shift
  if "$@" >/tmp/package-check.out 2>&1; then
    echo "package-check: ok: $what"
  else
    echo "package-check: FAILED: $what" >&2
    sed 's/^/    /' /tmp/package-check.out >&2
    exit 1
  fi
}

check "dpkg -i $deb" dpkg -i "$deb"
check "stealgate --version is $version" sh -c "/usr/bin/stealgate --version | grep -qx 'stealgate $version'"
check "the installed config is valid" /usr/bin/stealgate --check-config "$conf"
check "$conf is a conffile" sh -c "dpkg-query -W -f='\${Conffiles}' stealgate | grep -q ' $conf '"
check "systemd-analyze verify of the units" sh -c "cd $unitdir && systemd-analyze verify ${units[*]}"
# (listed, not looked up: a dpkg path-exclude, as in slim images, may keep it off the disk)
check "the man page is in the package and renders without warnings" sh -c "
  dpkg-query -L stealgate | grep -qx /usr/share/man/man8/stealgate.8.gz &&
  dpkg-deb --fsys-tarfile '$deb' | tar -xO ./usr/share/man/man8/stealgate.8.gz | gunzip >/tmp/package-check.8 &&
  test -z \"\$(man --warnings -E UTF-8 -l -Tutf8 /tmp/package-check.8 2>&1 >/dev/null)\""
check "a fresh install enables the service and both sockets" sh -c "
  test -L /etc/systemd/system/multi-user.target.wants/stealgate.service &&
  test -L /etc/systemd/system/sockets.target.wants/stealgate.socket &&
  test -L /etc/systemd/system/sockets.target.wants/stealgate-admin.socket"

echo "# edited locally by package-check" >>"$conf"
check "an upgrade in place (dpkg -i again)" dpkg -i "$deb"
check "the upgrade kept the local edit of the conffile" grep -q "edited locally by package-check" "$conf"

check "dpkg -r" dpkg -r stealgate
check "remove took the binary and units, kept the conffile" sh -c "
  ! test -e /usr/bin/stealgate && ! test -e $unitdir/stealgate.service && test -f $conf"
check "dpkg --purge" dpkg --purge stealgate
check "purge took the conffile and the enablement links" sh -c "
  ! test -e $conf && ! test -e /etc/systemd/system/multi-user.target.wants/stealgate.service &&
  ! test -e /etc/systemd/system/sockets.target.wants/stealgate.socket"
echo "package-check: all checks passed"
