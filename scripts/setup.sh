#!/usr/bin/env bash
# Installs exactly the Debian 12 packages stealgate needs that are missing; idempotent.
#   scripts/setup.sh          build + run dependencies
#   scripts/setup.sh --package  also what scripts/package.sh needs (dpkg-shlibdeps, lintian)
#   scripts/setup.sh --test   also what the test suites need (prometheus for promtool
#                             and the scrape test, systemd for systemd-analyze, clang for
#                             the fuzzers, chromium for the scheduler page test,
#                             libnss-wrapper for the DNS refresh test's changing names,
#                             and the packaging tools: the test command builds, installs
#                             and removes the .deb)
set -euo pipefail

packages=(
  meson ninja-build pkg-config g++ python3
  libasio-dev node-llhttp libspdlog-dev libfmt-dev libyaml-cpp-dev libre2-dev prometheus-cpp-dev
  libsystemd-dev liburing-dev libssl-dev openssl libgtest-dev libgmock-dev libbenchmark-dev curl
)
if [[ "${1:-}" == --test || "${1:-}" == --package ]]; then
  packages+=(dpkg-dev lintian man-db)
fi
if [[ "${1:-}" == --test ]]; then
  packages+=(prometheus systemd clang-14 libclang-rt-14-dev chromium libnss-wrapper)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# --no-install-recommends: libasio-dev would otherwise pull Boost and OpenSSL -dev packages.
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
