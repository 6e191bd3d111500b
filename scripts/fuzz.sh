#!/usr/bin/env bash
# Runs libFuzzer targets (tests/fuzz) built with clang, ASan and UBSan in build-fuzz/.
#   scripts/fuzz.sh TARGET SECONDS     # one target: request response chunked path header_rules config proxy_header
#   scripts/fuzz.sh all SECONDS        # every target, FUZZ_JOBS (2) at a time, SECONDS each
# Each run first replays the target's seeds (tests/fuzz/seeds.py, made from the tests) and
# its regressions (tests/fuzz/regressions/TARGET: every crash ever found), then fuzzes with
# the HTTP dictionary for SECONDS. New interesting inputs go to build-fuzz/corpus/TARGET; a
# crash is written to build-fuzz/crashes/TARGET/ and the run fails: copy the file into
# tests/fuzz/regressions/TARGET/ and write the test that pins the fix.
# Prints "fuzz TARGET: N runs, 0 crashes" per target; exits non-zero on any crash.
set -uo pipefail
cd "$(dirname "$0")/.."
TARGETS=(request response chunked path header_rules config proxy_header)

usage() { echo "usage: scripts/fuzz.sh {all|${TARGETS[*]// /|}} SECONDS" >&2; exit 2; }
[[ $# -eq 2 && "$2" =~ ^[0-9]+$ ]] || usage
want="$1" seconds="$2"
if [[ "$want" != all ]] && [[ " ${TARGETS[*]} " != *" $want "* ]]; then usage; fi

scripts/setup.sh --test >/dev/null || { echo "fuzz: setup failed"; exit 1; }
if [[ ! -f build-fuzz/build.ninja ]]; then
  CC=clang-14 CXX=clang++-14 meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
    --buildtype=debugoptimized >build-fuzz.setup.log 2>&1 || { cat build-fuzz.setup.log; exit 1; }
  rm -f build-fuzz.setup.log
fi
ninja -C build-fuzz >build-fuzz/build.log 2>&1 || { tail -40 build-fuzz/build.log; exit 1; }
python3 tests/fuzz/seeds.py build-fuzz/seeds >/dev/null || { echo "fuzz: seed generation failed"; exit 1; }

run_one() {  # target
  local t="$1" log="build-fuzz/fuzz-$1.log"
  mkdir -p "build-fuzz/corpus/$t" "build-fuzz/crashes/$t" "tests/fuzz/regressions/$t"
  # -timeout: one input taking 10 s is a hang (a finding too); -rss_limit_mb bounds memory.
  ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1" UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
    "build-fuzz/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -dict=tests/fuzz/http.dict -artifact_prefix="build-fuzz/crashes/$t/" -print_final_stats=1 \
    "build-fuzz/corpus/$t" "build-fuzz/seeds/$t" "tests/fuzz/regressions/$t" >"$log" 2>&1
  local rc=$?
  local runs
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [[ $rc -ne 0 ]]; then
    echo "fuzz $t: CRASH (exit $rc) after ${runs:-?} runs; input in build-fuzz/crashes/$t/, log $log"
    grep -m1 -E "ERROR:|property failed|runtime error" "$log" || tail -5 "$log"
    return 1
  fi
  echo "fuzz $t: ${runs:-0} runs, 0 crashes ($seconds s, corpus $(ls "build-fuzz/corpus/$t" | wc -l) inputs)"
}

failed=0
if [[ "$want" == all ]]; then
  pids=()
  for t in "${TARGETS[@]}"; do
    run_one "$t" &
    pids+=($!)
    if ((${#pids[@]} == ${FUZZ_JOBS:-2})); then
      for p in "${pids[@]}"; do wait "$p" || failed=1; done
      pids=()
    fi
  done
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
else
  run_one "$want" || failed=1
fi
exit $failed
