#!/usr/bin/env bash
# User-space instructions per TLS connection (a full handshake, one proxied GET, close),
# stealgate against nginx, counted by callgrind: the wall clock of tls_bench.sh swings by
# more than the gaps worth chasing on the 2-core box, instruction counts do not. Same
# certificate (ECDSA P-256) and backend as tls_bench.sh; stealgate on epoll (valgrind does
# not run io_uring), nginx as one process (master_process off). 50 warm-up connections,
# counters zeroed, then N (default 300) one after another from Python's ssl module, every
# thread counted. Kernel time is not in these counts: compare syscalls with perf stat.
# RESUMED=1: each connection resumes the session of the one before (a TLS 1.3 ticket), as
# returning clients do, instead of a full handshake.
#   apt-get install -y valgrind nginx-light     # once
#   tests/bench/tls_icount.sh build-release/src/stealgate
#   RESUMED=1 tests/bench/tls_icount.sh build-release/src/stealgate
set -euo pipefail
BIN=${1:?usage: tls_icount.sh STEALGATE_BINARY}
N=${N:-300}
RESUMED=${RESUMED:-0}
kind="full handshakes"
[ "$RESUMED" = 1 ] && kind="resumed sessions"
for tool in valgrind callgrind_control callgrind_annotate nginx openssl python3; do
  command -v "$tool" >/dev/null || { echo "tls_icount: $tool is missing (apt-get install -y valgrind nginx-light)"; exit 2; }
done
source "$(dirname "$0")/lib.sh"
bench_workdir tls-icount

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/key.pem" -out "$work/cert.pem" \
  -days 2 -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" 2>/dev/null
backend_conf 19151
cat >"$work/nginx.conf" <<EOF
master_process off; daemon off; pid $work/nginx.pid; error_log $work/nginx.err;
events { worker_connections 1024; }
http { access_log off; keepalive_requests 1000000;
  upstream backend { server 127.0.0.1:19151; keepalive 64; }
  ssl_session_cache shared:SSL:10m; ssl_session_tickets on; ssl_protocols TLSv1.2 TLSv1.3;
  server { listen 127.0.0.1:18471 ssl; ssl_certificate $work/cert.pem; ssl_certificate_key $work/key.pem;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
EOF
cat >"$work/sg.yaml" <<EOF
# Under callgrind a poll runs ~50x slower, and short polls would pass the 100 us after
# which a worker polls its driver at once: counts without those visits, as at full speed.
runtime: { worker_threads: 2, driver_visit_after_poll_us: 0 }
admin: { address: 127.0.0.1:19952 }
listeners:
  - name: tls
    address: 127.0.0.1:18472
    tls: { certificates: [ { cert: $work/cert.pem, key: $work/key.pem } ] }
clusters: [ { name: backend, endpoints: [127.0.0.1:19151] } ]
routes: [ { name: all, match: { path_prefix: / }, cluster: backend } ]
logging: { access_log: { enabled: false }, level: warning }
EOF
nginx -c "$work/backend.conf" -p "$work" &

connections() {  # port count: connections one after another, each reading to the close
  python3 - "$1" "$2" "$RESUMED" <<'PY'
import socket, ssl, sys
port, n, resume = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
session, resumed = None, 0
for _ in range(n):
    with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), session=session) as s:
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        body = b""
        while True:
            try:
                d = s.recv(65536)
            except (ssl.SSLError, ConnectionResetError):
                break
            if not d:
                break
            body += d
        if not body.endswith(b"hello\n"):
            sys.exit(f"port {port}: unexpected response {body[:80]!r}")
        resumed += s.session_reused
        if resume:
            session = s.session  # its ticket came with the response
if resume and resumed < n - 1:
    sys.exit(f"port {port}: only {resumed} of {n} connections resumed")
PY
}

count() {  # name port command...: instructions per connection under callgrind
  local name=$1 port=$2 total
  shift 2
  total=$(callgrind_total "$work/cg-$name.out" "$port" 50 "$N" connections "$port" -- "$@")
  echo "$name: $((total / N)) instructions per connection (callgrind, $N $kind)"
}
STEALGATE_IO_DRIVER=epoll count stealgate 18472 "$BIN" -c "$work/sg.yaml"
count nginx 18471 nginx -c "$work/nginx.conf" -p "$work"
