# Shared by the bench scripts beside it (sourced, not run).

# bench_workdir NAME: makes $work (/tmp/sg-NAME.XXXXXX) for the script's configs, logs and
# outputs; at exit, stops every process whose command line names it, and removes it when
# the script succeeded (a failed run keeps it: its logs say why; KEEP_WORK=1 keeps it
# always, e.g. for request_icount.sh's callgrind files).
bench_workdir() {
  work=$(mktemp -d "/tmp/sg-$1.XXXXXX")
  trap bench_cleanup EXIT
}
bench_cleanup() {
  local rc=$?
  pkill -f "$work/" 2>/dev/null || true
  [ "$rc" -ne 0 ] || [ -n "${KEEP_WORK:-}" ] || { sleep 0.2; rm -rf "$work"; }
}

# backend_conf PORT: $work/backend.conf, a one-worker nginx answering "hello\n" to every
# request on 127.0.0.1:PORT (start it with: nginx -c "$work/backend.conf" -p "$work"),
# except GET /64k: the file $work/64k, where a script made one (and $work readable to
# nginx's workers, which run as another user).
backend_conf() {
  cat >"$work/backend.conf" <<EOF
worker_processes 1; daemon off; pid $work/backend.pid; error_log $work/backend.err;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 100000000;
  server { listen 127.0.0.1:$1; root $work;
    location = /64k { }
    location / { return 200 "hello\n"; } } }
EOF
}

# callgrind_total OUT PORT WARMUP N LOAD... -- COMMAND...: starts COMMAND under callgrind
# (its output in OUT.1, its log in OUT.log), waits until it accepts on 127.0.0.1:PORT, runs
# "LOAD... WARMUP" (the script's own load function and its arguments), zeroes the counters,
# runs "LOAD... N", stops COMMAND and prints the instructions counted after the warm-up.
callgrind_total() {
  local out=$1 port=$2 warm=$3 n=$4
  shift 4
  local load=()
  while [[ $1 != -- ]]; do
    load+=("$1")
    shift
  done
  shift
  valgrind --tool=callgrind --callgrind-out-file="$out" "$@" >"$out.log" 2>&1 &
  local pid=$!
  for _ in $(seq 150); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $port))" 2>/dev/null && break
    sleep 0.2
  done
  "${load[@]}" "$warm" || return 1
  callgrind_control -z "$pid" >/dev/null 2>&1
  "${load[@]}" "$n" || return 1
  callgrind_control -d "$pid" >/dev/null 2>&1
  sleep 1
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  callgrind_annotate "$out.1" 2>/dev/null | grep -m1 "PROGRAM TOTALS" | awk '{gsub(",", "", $1); print $1}'
}
