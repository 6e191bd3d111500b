#!/usr/bin/env bash
# Sets everything up, builds a release binary and runs stealgate on config/stealgate.yaml
# (a direct response on 127.0.0.1:8080, the admin endpoint on 127.0.0.1:9901).
#   scripts/run.sh [extra stealgate arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build-release.sh
echo "stealgate: serving http://127.0.0.1:8080/ (admin: http://127.0.0.1:9901/metrics); Ctrl-C to stop"
exec build-release/src/stealgate --config config/stealgate.yaml "$@"
