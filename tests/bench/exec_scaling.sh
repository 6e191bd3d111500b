#!/usr/bin/env bash
# Executor scaling: the five workloads of ../shared/bench/executor at several worker counts,
# stealgate beside Tokio, Asio, oneTBB and Go, each worker count one run of that harness
# (runtimes interleaved within it). Not a test: it prints, per workload, median M ops/s by
# worker count and runtime. Meant for a machine with more cores than workers asked for.
#
#   tests/bench/exec_scaling.sh build-bench/tests/bench/exec_bench
#   WORKERS_LIST="1 16 2 8 4" RUNS=2 RUNTIMES="tokio asio_defer tbb go" tests/bench/exec_scaling.sh BIN
#   tests/bench/exec_scaling.sh --table RAW...    # the table of raw files written earlier
#
# BENCH_DIR (default /tmp/stealgate-bench/executor) holds the anchors' bin/ (the harness's
# build.sh); HARNESS (default ../shared/bench/executor) its run.sh. Endpoints first in the
# default list, so a run cut short still has them. Raw samples: $BENCH_DIR/scaling-<stamp>.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."

table() {  # raw files, each sample under a "# WORKERS=N" line
  python3 - "$@" <<'EOF'
import collections, statistics, sys
samples = collections.defaultdict(list)
for path in sys.argv[1:]:
    workers = None
    for line in open(path):
        if line.startswith('# WORKERS='):
            workers = int(line.split('=')[1])
        elif line.strip() and not line.startswith('#'):
            rt, workload, n, secs, _ = line.split()
            samples[(workload, rt, workers)].append(float(secs) / int(n))
workloads = list(dict.fromkeys(w for w, _, _ in samples))
runtimes = list(dict.fromkeys(r for _, r, _ in samples))
counts = sorted({k for _, _, k in samples})
for workload in workloads:
    print(f"{workload} (median M ops/s)")
    print("  workers" + "".join(f"{r:>12}" for r in runtimes))
    for k in counts:
        cells = [samples.get((workload, r, k)) for r in runtimes]
        print(f"  {k:>7}" + "".join(f"{1 / statistics.median(c) / 1e6:>12.2f}" if c else f"{'-':>12}" for c in cells))
EOF
}

if [[ "${1:-}" == --table ]]; then
  shift
  table "$@"
  exit
fi
[[ $# -eq 1 ]] || { sed -n '2,13p' "$0"; exit 2; }
BIN=$(realpath "$1")
HARNESS=${HARNESS:-../shared/bench/executor}
BENCH_DIR=${BENCH_DIR:-/tmp/stealgate-bench/executor}
[[ -x $HARNESS/run.sh ]] || { echo "exec_scaling: no harness at $HARNESS" >&2; exit 2; }
raw=$BENCH_DIR/scaling-$(date +%Y%m%d-%H%M%S).txt
mkdir -p "$BENCH_DIR"
for w in ${WORKERS_LIST:-1 16 2 8 4}; do
  echo "== WORKERS=$w" >&2
  before=$(ls "$BENCH_DIR/results" 2>/dev/null || true)
  WORKERS=$w RUNS=${RUNS:-2} BENCH_DIR=$BENCH_DIR STEALGATE_BIN=$BIN "$HARNESS/run.sh" >/dev/null
  stamp=$(comm -13 <(echo "$before") <(ls "$BENCH_DIR/results") | tail -1)
  { echo "# WORKERS=$w"; cat "$BENCH_DIR/results/$stamp/raw.txt"; } >>"$raw"
done
echo "raw samples: $raw"
table "$raw"
