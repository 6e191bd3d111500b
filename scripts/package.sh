#!/usr/bin/env bash
# Builds the Debian package dist/stealgate_<version>_<arch>.deb and checks it with lintian
# (any error fails the build; the other tags are printed).
#   scripts/package.sh             build the package
#   scripts/package.sh --check     also install it with dpkg -i, check the installed binary,
#                                  config and unit files, then purge it again (what the test
#                                  command runs; needs root and no stealgate package installed)
# The package: /usr/bin/stealgate (release build, stripped), /etc/stealgate/stealgate.yaml
# (a conffile: local edits survive upgrades), the service and socket units in
# /lib/systemd/system, README.md and config/README.md in /usr/share/doc/stealgate, and
# stealgate(8) generated from --help and config/README.md (scripts/manpage.py).
# postinst enables the units on a fresh install without starting them, and on an upgrade
# hands a running daemon over to the new binary by SIGUSR2 (no connection is refused).
set -euo pipefail
cd "$(dirname "$0")/.."
check=false
[[ "${1:-}" == --check ]] && check=true

scripts/setup.sh --package
version=$(sed -n "s/^  version: '\(.*\)',$/\1/p" meson.build)
arch=$(dpkg --print-architecture)
deb="dist/stealgate_${version}_${arch}.deb"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

echo "package: building the release binary (build-release)"
scripts/build-release.sh
ninja -C build-release >/dev/null
DESTDIR="$stage" meson install -C build-release --no-rebuild --quiet

# Debian 12 keeps system units in /lib/systemd/system (usr-merge moves them later).
mkdir -p "$stage/lib/systemd"
mv "$stage/usr/lib/systemd/system" "$stage/lib/systemd/system"
rmdir -p --ignore-fail-on-non-empty "$stage/usr/lib/systemd"
strip --remove-section=.comment --remove-section=.note --strip-unneeded "$stage/usr/bin/stealgate"

doc="$stage/usr/share/doc/stealgate"
install -d "$stage/usr/share/man/man8"
python3 scripts/manpage.py build-release/src/stealgate config/README.md "$version" |
  gzip -9n >"$stage/usr/share/man/man8/stealgate.8.gz"
cat >"$doc/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: stealgate

Files: *
Copyright: 2026 The stealgate authors
License: Apache-2.0
 On Debian systems, the full text of the Apache License 2.0 can be found in
 /usr/share/common-licenses/Apache-2.0.
EOF
maintainer="stealgate maintainers <maintainers@stealgate.org>"
{
  echo "stealgate ($version) unstable; urgency=medium"
  echo
  git log -20 --format='  * %s' 2>/dev/null | cut -c1-78 || echo "  * Release $version."
  echo
  echo " -- $maintainer  $(date -R -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)")"
} | gzip -9n >"$doc/changelog.gz"

install -d "$stage/DEBIAN"
echo /etc/stealgate/stealgate.yaml >"$stage/DEBIAN/conffiles"
install -m 0755 deploy/debian/postinst deploy/debian/prerm deploy/debian/postrm "$stage/DEBIAN/"

# Library dependencies as dpkg-shlibdeps computes them (it wants a debian/control beside it).
mkdir -p "$stage/shlibs/debian"
printf 'Source: stealgate\n\nPackage: stealgate\nArchitecture: any\n' >"$stage/shlibs/debian/control"
shlibs=$(cd "$stage/shlibs" && dpkg-shlibdeps -O -e"$stage/usr/bin/stealgate" 2>/dev/null |
  sed -n 's/^shlibs:Depends=//p')
rm -rf "$stage/shlibs"

size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat >"$stage/DEBIAN/control" <<EOF
Package: stealgate
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $size
Depends: $shlibs, init-system-helpers (>= 1.52)
Section: httpd
Priority: optional
Homepage: https://stealgate.org
Description: HTTP/1.1 reverse proxy and API gateway on a work-stealing executor
 stealgate forwards HTTP/1.1 traffic to pools of upstream servers with load
 balancing, health checks and outlier ejection, bounded admission (a fast 503
 when full), routes in YAML reloaded without dropping a request, and a
 Prometheus endpoint with proxy and executor metrics. It runs as a systemd
 service with socket activation and upgrades its binary without refusing a
 connection.
EOF
# systemctl kill is how a running daemon is handed over by USR2 (deb-systemd-invoke only
# starts, stops and restarts); the override says so to lintian.
install -D -m 0644 deploy/debian/lintian-overrides "$stage/usr/share/lintian/overrides/stealgate"
find "$stage" -type d -exec chmod 0755 {} +
find "$stage" -type f ! -path "$stage/DEBIAN/p*" ! -path "$stage/usr/bin/*" -exec chmod 0644 {} +

mkdir -p dist
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "package: $deb"
dpkg-deb --contents "$deb" | awk '{print "  " $1, $6}'

echo "package: lintian"
if ! lintian --fail-on error "$deb"; then
  echo "package: lintian reported errors" >&2
  exit 1
fi

if $check; then
  scripts/package-check.sh "$deb"
fi
