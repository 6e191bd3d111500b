#!/usr/bin/env bash
# Builds the release binary build-release/src/stealgate (what scripts/run.sh serves and
# what scripts/package.sh ships): -O3, NDEBUG, no tests, installing under /usr with the
# configuration in /etc. Assumes scripts/setup.sh has run.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -f build-release/build.ninja ]]; then
  meson setup build-release --buildtype=release --prefix=/usr --sysconfdir=/etc \
    -Dtests=false -Dbenchmarks=false >/dev/null
fi
ninja -C build-release src/stealgate >/dev/null
