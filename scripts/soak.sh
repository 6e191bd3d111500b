#!/usr/bin/env bash
# Soak test: a mixed load through the real binary and real upstreams for a bounded time,
# on 127.0.0.1 (tests/soak/soak.py says what runs and what fails it).
#   scripts/soak.sh --duration 60          # seconds; builds the release binary first
#   scripts/soak.sh --duration 600 --bin build-test/src/stealgate
# Ends with "soak: 1 passed, 0 failed" (or "0 passed, 1 failed") and exits non-zero on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=60
bin=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --duration) duration="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    *) echo "usage: scripts/soak.sh [--duration SECONDS] [--bin PATH]" >&2; exit 2 ;;
  esac
done
if [[ -z "$bin" ]]; then
  scripts/setup.sh >/dev/null
  scripts/build-release.sh
  bin=build-release/src/stealgate
fi
STEALGATE_BIN="$(realpath "$bin")" exec python3 -u tests/soak/soak.py --duration "$duration"
