#!/usr/bin/env bash
# User-space instructions per proxied request, stealgate against nginx, counted by
# callgrind (the wall clock on the 2-core box swings more than the changes worth
# measuring). Three request shapes: keepalive (small GETs, 4,000 on 8 connections), close
# (a new connection per GET, 1,000 of them, as the bench's `close` scenario) and post (16
# KiB request bodies, 1,000 on 8 connections); SHAPES="keepalive post" picks some. Each
# after a warm-up with counters zeroed, every thread counted. stealgate on epoll (valgrind
# does not run io_uring), nginx as one process (master_process off), both with upstream
# keep-alive to the same backend. Kernel time is not in these counts: compare syscalls
# with perf stat. Compare two builds with two runs (ANCHOR=0 skips nginx):
#   apt-get install -y valgrind nginx-light     # once
#   tests/bench/request_icount.sh build-release/src/stealgate
#   ANCHOR=0 tests/bench/request_icount.sh /tmp/old/build-release/src/stealgate
set -euo pipefail
BIN=${1:?usage: request_icount.sh STEALGATE_BINARY}
for tool in valgrind callgrind_control callgrind_annotate nginx python3; do
  command -v "$tool" >/dev/null || { echo "request_icount: $tool is missing (apt-get install -y valgrind nginx-light)"; exit 2; }
done
source "$(dirname "$0")/lib.sh"
bench_workdir icount
backend_conf 19141
cat >"$work/sg.yaml" <<EOF2
# Under callgrind a poll runs ~50x slower, and short polls would pass the 100 us after
# which a worker polls its driver at once: counts without those visits, as at full speed.
runtime: { worker_threads: 2, driver_visit_after_poll_us: 0 }
admin: { address: 127.0.0.1:19942 }
listeners: [ { name: public, address: 127.0.0.1:18461 } ]
clusters: [ { name: backend, endpoints: [127.0.0.1:19141] } ]
routes: [ { name: all, match: { path_prefix: / }, cluster: backend } ]
logging: { access_log: { enabled: false }, level: warning }
EOF2
cat >"$work/nginx.conf" <<EOF2
master_process off; daemon off; pid $work/nginx.pid; error_log $work/nginx.err;
events { worker_connections 1024; }
http { access_log off; keepalive_requests 1000000;
  upstream backend { server 127.0.0.1:19141; keepalive 64; }
  server { listen 127.0.0.1:18462;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
EOF2
nginx -c "$work/backend.conf" -p "$work" &

requests() {  # port shape count
  python3 - "$@" <<'PY'
import socket, sys
port, shape, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
def read_response(s):
    buf = b""
    while not buf.endswith(b"hello\n"):
        d = s.recv(4096)
        if not d:
            sys.exit(f"port {port}: closed after {buf[:80]!r}")
        buf += d
    return buf
if shape in ("keepalive", "post"):
    body = b"p" * 16384
    request = (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" if shape == "keepalive" else
               b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 16384\r\n\r\n" + body)
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
    for _ in range(n // 8):
        for s in socks:
            s.sendall(request)
        for s in socks:
            read_response(s)
else:
    for _ in range(n):
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            read_response(s)
            s.recv(16)  # the close
PY
}

count() {  # name port shape count command...: instructions per request under callgrind
  local name=$1 port=$2 shape=$3 n=$4 total
  shift 4
  total=$(callgrind_total "$work/cg-$name-$shape.out" "$port" $((n / 2)) "$n" requests "$port" "$shape" -- "$@")
  printf '%-9s %-9s %7d instructions per request (callgrind, %d requests)\n' "$name" "$shape" $((total / n)) "$n"
}
for shape in ${SHAPES:-keepalive close post}; do
  n=4000
  [ "$shape" = keepalive ] || n=1000
  STEALGATE_IO_DRIVER=epoll count stealgate 18461 "$shape" "$n" "$BIN" -c "$work/sg.yaml"
  [ "${ANCHOR:-1}" = 0 ] || count nginx 18462 "$shape" "$n" nginx -c "$work/nginx.conf" -p "$work"
done
