#!/usr/bin/env bash
# Before/after of two exec_bench builds: the harness's workloads, processes of the two
# builds alternating (so that machine drift hits both), one line per worker count and
# workload with both medians and their ratio. Not a test. Build the "before" binary first
# and copy it aside, e.g. cp build-bench/tests/bench/exec_bench /tmp/exec_bench.before.
#
#   tests/bench/exec_ab.sh /tmp/exec_bench.before build-bench/tests/bench/exec_bench
#   WORKERS_LIST="16 8" ROUNDS=5 WORKLOADS="spawn_many_remote ping_pong" tests/bench/exec_ab.sh OLD NEW
#
# Each process runs WARMUP=1 and ITERS=3 (the harness contract); a cell's median is over
# ROUNDS (default 4: an even count balances which build runs first) processes x 3
# iterations. N operations per iteration (default 1M).
# On a machine lent for a few minutes, carry both binaries, liburing.so.2 and point
# LD_LIBRARY_PATH at it: nothing else is needed (python3 for the table).
set -euo pipefail
[[ $# -eq 2 && -x "$1" && -x "$2" ]] || { sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 2; }
old=$1 new=$2
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
for round in $(seq "${ROUNDS:-4}"); do
  for w in ${WORKERS_LIST:-2}; do
    for wl in ${WORKLOADS:-spawn_many_local spawn_many_remote yield_many ping_pong chained_spawn}; do
      # Which build goes first alternates by round (proxy_ab.sh measured the second of two
      # back-to-back processes slower).
      sides="old new"
      ((round % 2)) || sides="new old"
      for side in $sides; do
        bin=$old
        [[ $side == new ]] && bin=$new
        WORKERS=$w ITERS=3 WARMUP=1 ENABLE_IO=1 timeout 120 "$bin" "$wl" "${N:-1000000}" |
          awk -v s=$side -v w=$w '{print s, w, $2, $3, $4}' >>"$raw"
      done
    done
  done
  echo "round $round done" >&2
done
python3 - "$raw" <<'EOF'
import collections, statistics, sys
secs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    side, workers, workload, n, s = line.split()
    secs[(int(workers), workload, side)].append(float(s) / int(n))
print(f"{'workers':>7} {'workload':<18} {'old M/s':>9} {'new M/s':>9} {'new/old':>8}  samples")
for workers, workload in sorted({(w, wl) for w, wl, _ in secs}):
    old, new = secs.get((workers, workload, 'old')), secs.get((workers, workload, 'new'))
    if not old or not new:
        continue
    mo, mn = statistics.median(old), statistics.median(new)
    print(f"{workers:>7} {workload:<18} {1 / mo / 1e6:>9.2f} {1 / mn / 1e6:>9.2f} {mo / mn:>8.2f}  {len(old)},{len(new)}")
EOF
