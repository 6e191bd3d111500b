#!/usr/bin/env bash
# Sets everything up and runs every test suite, four builds:
#   1. build-test   (debugoptimized): unit, stress, integration and benchmark smoke tests
#      build-release (scripts/run.sh's -O3 binary): builds, checks config/*.yaml
#   2. build-asan   (AddressSanitizer + UndefinedBehaviorSanitizer): every test again
#   3. build-tsan   (ThreadSanitizer): the concurrency suite (executor, io, stress)
# Prints "N passed, M failed" last and exits non-zero on any failure.
#   STEALGATE_TEST_SKIP="asan tsan" scripts/test.sh   # skip sanitizer builds (local iteration)
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test || { echo "0 passed, 1 failed"; exit 1; }

skip=" ${STEALGATE_TEST_SKIP:-} "
jobs=$(nproc)
passed=0
failed=0
failures=()

summarize() {  # build dir, label
  local log="$1/meson-logs/testlog.json"
  if [[ ! -f "$log" ]]; then
    failed=$((failed + 1))
    failures+=("$2: no test log")
    return
  fi
  local p f name
  read -r p f < <(python3 - "$log" <<'PY'
import json, sys
ok = bad = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["result"] in ("OK", "EXPECTEDFAIL"):
        ok += 1
    elif r["result"] != "SKIP":
        bad += 1
print(ok, bad)
PY
)
  passed=$((passed + p))
  failed=$((failed + f))
  while IFS= read -r name; do
    [[ -n "$name" ]] && failures+=("$2: $name")
  done < <(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l)
    if r["result"] not in ("OK","EXPECTEDFAIL","SKIP"): print(r["name"])' "$log")
  echo "== $2: $p passed, $f failed"
}

run_suite() {  # label, build dir, meson setup args, compile targets ("" = all), test args
  local label="$1" dir="$2" setup_args="$3" targets="$4" test_args="$5"
  echo "== $label: configuring $dir"
  if [[ -f "$dir/build.ninja" ]]; then
    meson setup --reconfigure "$dir" $setup_args >/dev/null || true
  else
    meson setup "$dir" $setup_args >/dev/null || { failed=$((failed + 1)); failures+=("$label: meson setup"); return; }
  fi
  rm -f "$dir/meson-logs/testlog.json"
  echo "== $label: building"
  if ! ninja -C "$dir" -j "$jobs" $targets >"$dir/build.log" 2>&1; then
    tail -40 "$dir/build.log"
    failed=$((failed + 1))
    failures+=("$label: build failed (see $dir/build.log)")
    return
  fi
  echo "== $label: testing"
  meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes "$jobs" $test_args
  summarize "$dir" "$label"
}

start=$(date +%s)
run_suite "tests" build-test "--buildtype=debugoptimized" "" ""

# The release binary of the README's first command (-O3, NDEBUG: other warnings, asserts
# compiled out) must build and accept every shipped configuration.
release_check() {
  scripts/build-release.sh || return 1
  local f
  for f in config/*.yaml; do build-release/src/stealgate --check-config "$f" || return 1; done
}
echo "== release: building build-release/src/stealgate"
if release_check >/tmp/stealgate-release-build.log 2>&1; then
  passed=$((passed + 1))
  echo "== release: 1 passed, 0 failed"
else
  tail -30 /tmp/stealgate-release-build.log
  failed=$((failed + 1))
  failures+=("release: build or --check-config of config/*.yaml")
  echo "== release: 0 passed, 1 failed"
fi

if [[ "$skip" != *" asan "* ]]; then
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
  run_suite "asan+ubsan" build-asan "--buildtype=debugoptimized -Db_sanitize=address,undefined -Db_lundef=false" "" \
    "--timeout-multiplier 3"
  unset ASAN_OPTIONS UBSAN_OPTIONS
fi

if [[ "$skip" != *" tsan "* ]]; then
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
  run_suite "tsan" build-tsan "--buildtype=debugoptimized -Db_sanitize=thread -Dbenchmarks=false" \
    "tests/unit/exec_unit_test tests/unit/io_unit_test tests/unit/proxy_unit_test tests/stress/exec_stress_test" \
    "--suite concurrency --timeout-multiplier 4"
  unset TSAN_OPTIONS
fi

echo
echo "test run took $(( $(date +%s) - start ))s"
for f in "${failures[@]}"; do echo "FAILED: $f"; done
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
