#!/usr/bin/env bash
# Sets everything up and runs every test suite:
#   1. build-test   (debugoptimized): unit, stress, integration and benchmark smoke tests;
#                   the integration suites twice: on `auto` (io_uring) and on epoll
#      build-release (scripts/run.sh's -O3 binary): builds, checks config/*.yaml, and
#                   is packaged, linted, installed, checked and purged (scripts/package.sh)
#   2. fuzz         (clang, libFuzzer + ASan/UBSan, build-fuzz): every target replays its
#                   seeds and regressions, then fuzzes for STEALGATE_FUZZ_SECONDS (20) each
#   3. soak         (release binary): scripts/soak.sh for STEALGATE_SOAK_SECONDS (60)
#   4. build-asan   (AddressSanitizer + UndefinedBehaviorSanitizer): every test again but the
#                   benchmark smoke test (no benchmark binaries in that build)
#   5. build-tsan   (ThreadSanitizer): the concurrency suite (executor, io, upstream pool, rate
#                   limiter, stress)
# Every suite is listed in the summary with its counts. A suite that did not run, ran no
# test, was skipped, or whose log cannot be read is a failure, as is a non-zero exit of
# meson test. Prints "N passed, M failed" last and exits non-zero on any failure.
#   STEALGATE_TEST_SKIP="asan tsan fuzz soak" scripts/test.sh   # local iteration only: the
#   summary names what was skipped, and CI (CI=true) refuses to skip anything.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test || { echo "0 passed, 1 failed"; exit 1; }

skip=" ${STEALGATE_TEST_SKIP:-} "
jobs=$(nproc)
passed=0
failed=0
failures=()
summary=()
skipped=()

fail() {  # label, why
  failed=$((failed + 1))
  failures+=("$1: $2")
}

# Reads a meson test log: one line per test ("name RESULT"), then "TOTAL ok bad"; a SKIP is
# bad (nothing may be skipped silently), an unreadable or empty log is one failure.
summarize() {  # build dir, label, meson exit status, log base name
  local log="$1/meson-logs/${4:-testlog}.json" label="$2" rc="$3" out
  if ! out=$(python3 - "$log" <<'PY'
import json, sys
ok = bad = 0
for line in open(sys.argv[1]):
    line = line.strip()
    if not line:
        continue
    r = json.loads(line)
    good = r["result"] in ("OK", "EXPECTEDFAIL")
    ok += good
    bad += not good
    print(f'{r["result"]} {r["name"]}')
print(f"TOTAL {ok} {bad}")
PY
); then
    fail "$label" "test log $log missing or unreadable"
    summary+=("$label: no readable test log")
    return
  fi
  local p f
  read -r _ p f <<<"$(tail -1 <<<"$out")"
  if [[ ! "$p" =~ ^[0-9]+$ || ! "$f" =~ ^[0-9]+$ ]]; then
    fail "$label" "could not count results in $log"
    return
  fi
  local name result
  while read -r result name; do
    [[ "$result" == TOTAL ]] && continue
    summary+=("$label / $name: $result")
    [[ "$result" == OK || "$result" == EXPECTEDFAIL ]] || failures+=("$label: $name $result")
  done <<<"$out"
  passed=$((passed + p))
  failed=$((failed + f))
  if ((p + f == 0)); then fail "$label" "ran no test"; fi
  if ((rc != 0 && f == 0)); then fail "$label" "meson test exited with $rc but logged no failure"; fi
  echo "== $label: $p passed, $f failed"
}

# Configures and builds a build directory, then runs its tests: the stress suite (all
# cores, CPU-bound) first and on its own, then everything else, so the integration suites'
# time bounds never compete with it.
# The executables of the tests in meson suite $2 of build dir $1, as ninja targets: a build
# that runs one suite compiles just those, and a test added to the suite is never left out.
suite_targets() {  # build dir, suite
  meson introspect --tests "$1" | python3 -c '
import json, os, sys
build, suite = os.path.realpath(sys.argv[1]), sys.argv[2]
tests = json.load(sys.stdin)
print(" ".join(sorted({os.path.relpath(t["cmd"][0], build) for t in tests
                       if any(s.split(":")[-1] == suite for s in t["suite"])})))' "$1" "$2"
}

run_suite() {  # label, build dir, meson setup args, compile targets ("" = all; "suite:NAME"), test args, stress test args
  local label="$1" dir="$2" setup_args="$3" targets="$4" test_args="$5" stress_args="${6:-}"
  echo "== $label: configuring $dir (at ${SECONDS}s)"
  if [[ -f "$dir/build.ninja" ]]; then
    # (meson configure first: setup --reconfigure keeps an existing c_args/cpp_args.)
    { meson configure "$dir" $setup_args && meson setup --reconfigure "$dir"; } >"$dir.setup.log" 2>&1 || {
      tail -20 "$dir.setup.log"; fail "$label" "meson setup --reconfigure"; return; }
  else
    meson setup "$dir" $setup_args >"$dir.setup.log" 2>&1 || {
      tail -20 "$dir.setup.log"; fail "$label" "meson setup"; return; }
  fi
  rm -f "$dir.setup.log" "$dir"/meson-logs/testlog*.json
  if [[ "$targets" == suite:* ]]; then
    targets=$(suite_targets "$dir" "${targets#suite:}")
    [[ -n "$targets" ]] || { fail "$label" "no test in meson suite ${4#suite:}"; return; }
  fi
  echo "== $label: building (at ${SECONDS}s)"
  if ! ninja -C "$dir" -j "$jobs" $targets >"$dir/build.log" 2>&1; then
    tail -40 "$dir/build.log"
    fail "$label" "build failed (see $dir/build.log)"
    return
  fi
  echo "== $label: testing (stress suite alone, then the rest; at ${SECONDS}s)"
  meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes "$jobs" $stress_args --suite stress \
    --logbase testlog-stress
  summarize "$dir" "$label" $? testlog-stress
  meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes "$jobs" $test_args --no-suite stress
  summarize "$dir" "$label" $?
}

# A step outside meson (fuzz, soak): its command's exit status decides.
run_step() {  # label, command...
  local label="$1"
  shift
  echo "== $label: $* (at ${SECONDS}s)"
  if "$@"; then
    passed=$((passed + 1))
    summary+=("$label: OK")
  else
    fail "$label" "$* failed"
    summary+=("$label: FAIL")
  fi
}

skipping() {  # step name: true if asked to skip it (never in CI)
  if [[ "$skip" == *" $1 "* ]]; then
    if [[ "${CI:-}" == true ]]; then
      fail "$1" "STEALGATE_TEST_SKIP may not skip suites in CI"
      return 1
    fi
    skipped+=("$1")
    return 0
  fi
  return 1
}

# Tests that cannot mean anything in a build (tests/integration/harness.py NOT_IN_THIS_BUILD)
# say so here; the summary lists them.
export STEALGATE_NOT_APPLICABLE_LOG="$PWD/build-not-applicable.log"
rm -f "$STEALGATE_NOT_APPLICABLE_LOG"

# Every build compiles its sources in unity groups of 8: each group parses Asio, spdlog and
# the standard headers, and instantiates their templates, once instead of 8 times. On this
# 2-core machine build-test took 216 s instead of 425, the ASan build 312 s (776 in the
# last CI run without), the TSan targets 67 s (217). All three builds group alike, so a
# name that two sources of a group both define fails in the first build already.
unity="-Dunity=on -Dunity_size=8"

start=$(date +%s)
run_suite "tests" build-test "--buildtype=debugoptimized $unity" "" ""
# The integration suites once more on the epoll driver: the pass above ran on `auto`
# (io_uring where the kernel allows it; where it does not, the summary's not-applicable
# list says so and both passes ran on epoll).
if [[ -f build-test/build.ninja ]]; then
  echo "== tests (epoll): the integration suites on STEALGATE_IO_DRIVER=epoll"
  STEALGATE_IO_DRIVER=epoll meson test -C build-test --no-rebuild --print-errorlogs --num-processes "$jobs" \
    --suite integration --logbase testlog-epoll
  summarize build-test "tests (epoll)" $? testlog-epoll
fi

# The release binary of the README's first command (-O3, NDEBUG: other warnings, asserts
# compiled out) must build and accept every shipped configuration.
release_check() {
  scripts/build-release.sh || return 1
  local f
  for f in config/*.yaml tests/bench/*.yaml; do build-release/src/stealgate --check-config "$f" || return 1; done
}
run_step "release" release_check
# The Debian package of that build: lintian without errors, then installed into this
# machine, checked (version, config, units, man page, conffile across an upgrade) and purged.
run_step "package" scripts/package.sh --check

if ! skipping fuzz; then
  run_step "fuzz" scripts/fuzz.sh all "${STEALGATE_FUZZ_SECONDS:-20}"
fi
if ! skipping soak; then
  run_step "soak" scripts/soak.sh --duration "${STEALGATE_SOAK_SECONDS:-60}" --bin build-release/src/stealgate
fi

# The sanitizer builds carry line tables only (-g1): their reports still name function,
# file and line (inlined frames too), and compiling takes about 30% less than with -g
# (sections_routes.cpp under ASan: 32 -> 22 s; the ASan build 593 -> 404 s in CI).
line_tables="-Ddebug=false -Dc_args=-g1 -Dcpp_args=-g1"

if ! skipping asan; then
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
  export STEALGATE_TIMEOUT_SCALE=3  # the integration harness's time bounds (tests/integration/harness.py)
  # At -O1 (AddressSanitizer's recommendation) and without the benchmark binaries (their
  # smoke test runs in build-test): at -O2 this build alone took 950 s of a 1,950 s run, at
  # -O1 626 s, while its tests take about a minute either way.
  run_suite "asan+ubsan" build-asan "-Doptimization=1 $line_tables $unity -Db_sanitize=address,undefined -Db_lundef=false -Dbenchmarks=false" "" \
    "--timeout-multiplier 3" "--timeout-multiplier 3"
  unset ASAN_OPTIONS UBSAN_OPTIONS STEALGATE_TIMEOUT_SCALE
fi

if ! skipping tsan; then
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
  export STEALGATE_TIMEOUT_SCALE=4
  run_suite "tsan" build-tsan "-Doptimization=2 $line_tables $unity -Db_sanitize=thread -Dbenchmarks=false" \
    "suite:concurrency" \
    "--suite concurrency --timeout-multiplier 4" "--timeout-multiplier 4"
  unset TSAN_OPTIONS STEALGATE_TIMEOUT_SCALE
fi

echo
echo "== summary (test run took $(( $(date +%s) - start ))s)"
for s in "${summary[@]}"; do echo "  $s"; done
if ((${#skipped[@]} > 0)); then echo "  skipped on request (STEALGATE_TEST_SKIP): ${skipped[*]}"; fi
if [[ -s "$STEALGATE_NOT_APPLICABLE_LOG" ]]; then
  echo "  not applicable in that build (not counted):"
  sed 's/^/    /' "$STEALGATE_NOT_APPLICABLE_LOG"
fi
for f in "${failures[@]}"; do echo "FAILED: $f"; done
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
