# Shared by the bench scripts beside it (sourced, not run).

# bench_workdir NAME: makes $work (/tmp/sg-NAME.XXXXXX) for the script's configs, logs and
# outputs; at exit, stops every process whose command line names it, and removes it when
# the script succeeded (a failed run keeps it: its logs say why).
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
# request on 127.0.0.1:PORT (start it with: nginx -c "$work/backend.conf" -p "$work").
backend_conf() {
  cat >"$work/backend.conf" <<EOF
worker_processes 1; daemon off; pid $work/backend.pid; error_log $work/backend.err;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:$1; location / { return 200 "hello\n"; } } }
EOF
}
