#!/usr/bin/env bash
# TLS termination benchmark: nginx and stealgate, same certificate (ECDSA P-256), same
# plain backend (nginx, 1 worker), both proxies with 2 workers, in one interleaved run.
# Not a test: it prints a table of req/s, proxy CPU per request, the clients' CPU per
# request and how much of the machine stayed idle (time the clients spent waiting with a CPU
# free), stealgate against nginx. The clients share the machine's 2 CPUs with the proxy:
# where they take most of it (openssl s_time's handshakes), req/s moves by a fraction of
# any change in the proxy's CPU.
# Odd rounds measure nginx first, even rounds stealgate first, so with ROUNDS >= 2 the
# medians come from both orders.
#
#   apt-get install -y nginx-light wrk   # once
#   tests/bench/tls_bench.sh [build-release/src/stealgate]
#   ROUNDS=3 DURATION=10 tests/bench/tls_bench.sh
#   SCENARIOS=keepalive ROUNDS=6 tests/bench/tls_bench.sh   # one scenario, more rounds
#   CLIENTS=1 SCENARIOS=resumed tests/bench/tls_bench.sh     # one client: latency, not CPU
#   REUSE_PORT=stealgate tests/bench/tls_bench.sh         # a listening socket per worker in the
#   REUSE_PORT="nginx stealgate" tests/bench/tls_bench.sh  # servers named (nginx: listen ...
#                                                          # reuseport; stealgate: reuse_port)
#
# Scenarios:
#   keepalive  wrk, 64 keep-alive HTTPS connections, small GETs
#   full       openssl s_time -new, CLIENTS (4) in parallel: a new connection and a full handshake
#              per request (not wrk: with "Connection: close" it resumes about half of
#              its connections)
#   resumed    openssl s_time -reuse, CLIENTS in parallel: a new connection per request, the
#              session resumed from a ticket (what browsers and most clients do)
# Everything listens on 127.0.0.1; every load run is bounded by DURATION seconds.
set -euo pipefail
cd "$(dirname "$0")/../.."
SG=${1:-build-release/src/stealgate}
ROUNDS=${ROUNDS:-3}
SCENARIOS=${SCENARIOS:-keepalive full resumed}
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-4}  # openssl s_time processes in parallel (full, resumed)
REUSE_PORT=${REUSE_PORT:-}  # the servers with a listening socket per worker: nginx, stealgate
ngx_reuseport="" sg_reuse_port=false
for server in $REUSE_PORT; do
  case $server in
    nginx) ngx_reuseport=" reuseport" ;;
    stealgate) sg_reuse_port=true ;;
    *) echo "tls_bench: REUSE_PORT names nginx or stealgate, not $server"; exit 2 ;;
  esac
done
for tool in nginx wrk openssl; do
  command -v "$tool" >/dev/null || { echo "tls_bench: $tool is missing (apt-get install -y nginx-light wrk)"; exit 2; }
done
[[ -x "$SG" ]] || { echo "tls_bench: no stealgate binary at $SG (scripts/build-release.sh)"; exit 2; }

work=$(mktemp -d /tmp/sg-tls-bench.XXXXXX)
pids=()
# The work directory stays only when the script failed (its logs say why).
cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ "$rc" -ne 0 ] || rm -rf "$work"
}
trap cleanup EXIT

# One certificate for both (the CA is what clients would trust; the benchmark clients do
# not verify, as wrk never does).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/key.pem" -out "$work/cert.pem" \
  -days 2 -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" 2>/dev/null

BACKEND=19111 NGX=18441 SGP=18442 SGADMIN=19912
mkdir -p "$work/nginx-backend" "$work/nginx-proxy"
cat >"$work/nginx-backend/nginx.conf" <<EOF
worker_processes 1; daemon off; pid $work/nginx-backend/pid; error_log $work/nginx-backend/error.log;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:$BACKEND; location / { return 200 "hello\n"; } } }
EOF
cat >"$work/nginx-proxy/nginx.conf" <<EOF
worker_processes 2; daemon off; pid $work/nginx-proxy/pid; error_log $work/nginx-proxy/error.log;
events { worker_connections 8192; }
http { access_log off; keepalive_requests 1000000;
  upstream backend { server 127.0.0.1:$BACKEND; keepalive 256; }
  ssl_session_cache shared:SSL:10m; ssl_session_tickets on; ssl_protocols TLSv1.2 TLSv1.3;
  server { listen 127.0.0.1:$NGX ssl$ngx_reuseport; ssl_certificate $work/cert.pem; ssl_certificate_key $work/key.pem;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
EOF
cat >"$work/stealgate.yaml" <<EOF
runtime: { worker_threads: 2 }
admin: { address: 127.0.0.1:$SGADMIN }
listeners:
  - name: tls
    address: 127.0.0.1:$SGP
    reuse_port: $sg_reuse_port
    tls: { certificates: [ { cert: $work/cert.pem, key: $work/key.pem } ] }
clusters:
  - name: backend
    endpoints: [127.0.0.1:$BACKEND]
routes:
  - name: all
    match: { path_prefix: / }
    cluster: backend
logging: { access_log: { enabled: false }, level: warning }
EOF

nginx -c "$work/nginx-backend/nginx.conf" -p "$work/nginx-backend" & pids+=($!)
nginx -c "$work/nginx-proxy/nginx.conf" -p "$work/nginx-proxy" & pids+=($!)
"$SG" -c "$work/stealgate.yaml" >"$work/stealgate.log" 2>&1 & pids+=($!)
sleep 1
curl -skf "https://127.0.0.1:$NGX/" >/dev/null && curl -skf "https://127.0.0.1:$SGP/" >/dev/null ||
  { echo "tls_bench: a server did not come up (see $work)"; exit 1; }

# CPU seconds (user + system) used so far by the processes listening on a port: nginx's
# master and workers, or stealgate.
cpu_of() {
  local port=$1 total=0 pid
  for pid in $(ss -Htlnp "sport = :$port" | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do
    local t
    t=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    total=$((total + t))
  done
  echo "$total"
}
ticks=$(getconf CLK_TCK)
# Idle and iowait jiffies of the whole machine so far (/proc/stat, all CPUs): a machine
# left idle while the clients wait is throughput lost to waits, not to CPU.
idle_jiffies() { awk '/^cpu / {print $5 + $6}' /proc/stat; }
cpus=$(grep -c '^cpu[0-9]' /proc/stat)  # the CPUs that line sums (nproc counts only ours)

# Runs one scenario against a port; prints how many requests (or connections) it made and
# the CPU seconds its clients used (user + system: they are the children of the command
# substitution that runs them, whose `times` reports them on its second line).
load() {
  local scenario=$1 port=$2 out n
  case $scenario in
    keepalive) out=$(wrk -t2 -c64 -d"${DURATION}s" "https://127.0.0.1:$port/"; times) ;;
    full | resumed)
      local mode=-new
      [[ $scenario == resumed ]] && mode=-reuse
      out=$(for _ in $(seq "$CLIENTS"); do
              openssl s_time -connect "127.0.0.1:$port" -www / -time "$DURATION" $mode 2>/dev/null &
            done; wait; times) ;;
  esac
  case $scenario in
    full | resumed) n=$(grep -o '^[0-9]* connections in [0-9.]*s' <<<"$out" | awk '{s += $1} END {print s + 0}') ;;
    *) n=$(grep -o '[0-9]* requests in' <<<"$out" | awk '{print $1}') ;;
  esac
  # the children's line: "0m12.345s 0m6.789s"
  local seconds
  seconds=$(tail -1 <<<"$out" | awk '{for (i = 1; i <= 2; i++) {split($i, t, /[ms]/); s += t[1] * 60 + t[2]} print s}')
  echo "$n $seconds"
}

printf '%-10s %-9s %10s %12s %7s %12s\n' scenario server req/s "CPU us/req" "idle %" "client us/req" \
  >"$work/results.txt"
for round in $(seq "$ROUNDS"); do
  # The server measured first in a scenario differs every round: in one order alone the
  # figures moved by up to 15% (the first run inherits a cold cache, the second the
  # first's TIME_WAIT sockets and client processes still exiting).
  targets=(nginx:$NGX stealgate:$SGP)
  ((round % 2 == 0)) && targets=(stealgate:$SGP nginx:$NGX)
  for scenario in $SCENARIOS; do
    for target in "${targets[@]}"; do
      name=${target%%:*} port=${target##*:}
      c0=$(cpu_of "$port") i0=$(idle_jiffies)
      read -r n client_s < <(load "$scenario" "$port")
      c1=$(cpu_of "$port") i1=$(idle_jiffies)
      python3 - "$scenario" "$name" "$n" "$((c1 - c0))" "$ticks" "$DURATION" "$((i1 - i0))" "$cpus" "$client_s" \
        >>"$work/results.txt" <<'PY'
import sys
scenario, name, n, cpu_ticks, hz, dur = sys.argv[1], sys.argv[2], int(sys.argv[3] or 0), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
idle_ticks, cpus, client_s = int(sys.argv[7]), int(sys.argv[8]), float(sys.argv[9])
us = cpu_ticks / hz * 1e6 / n if n else float("nan")
idle = 100 * idle_ticks / hz / (dur * cpus)
client_us = client_s * 1e6 / n if n else float("nan")
print(f"{scenario:<10} {name:<9} {n / dur:10.0f} {us:12.1f} {idle:7.1f} {client_us:12.1f}")
PY
    done
  done
done
echo "round results ($work/results.txt):"
cat "$work/results.txt"
echo
echo "medians of $ROUNDS rounds, stealgate against nginx (a listening socket per worker: ${REUSE_PORT:-neither}):"
python3 - "$work/results.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[1:] if l.strip()]
by = {}
for scen, name, rps, us, idle, client in rows:
    by.setdefault((scen, name), []).append((float(rps), float(us), float(idle), float(client)))
print(f"| scenario | nginx req/s | stealgate req/s | ratio | nginx CPU us/req | stealgate CPU us/req | ratio "
      f"| machine idle %, nginx / stealgate | clients' CPU us/req, nginx / stealgate |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
med = lambda rs, i: statistics.median(r[i] for r in rs)
for scen in ("keepalive", "full", "resumed"):
    n = by.get((scen, "nginx"), []); s = by.get((scen, "stealgate"), [])
    if not n or not s:
        continue
    nr, sr, nc, sc = med(n, 0), med(s, 0), med(n, 1), med(s, 1)
    print(f"| {scen} | {nr:.0f} | {sr:.0f} | {sr / nr:.2f} | {nc:.1f} | {sc:.1f} | {sc / nc:.2f} "
          f"| {med(n, 2):.1f} / {med(s, 2):.1f} | {med(n, 3):.1f} / {med(s, 3):.1f} |")
PY
curl -s "http://127.0.0.1:$SGADMIN/metrics" | grep -E '^stealgate_tls_handshakes_total' | grep -v ' 0$' || true
