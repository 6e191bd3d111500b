#!/usr/bin/env bash
# User-space instructions per proxied small GET, counted by callgrind (the wall clock on the
# 2-core box swings more than the changes worth measuring). epoll driver: valgrind does not
# run io_uring. 2,000 warm-up requests, counters zeroed, then 4,000 on 8 keep-alive
# connections, every thread counted. Compare two builds with two runs:
#   apt-get install -y valgrind nginx-light     # once
#   tests/bench/request_icount.sh build-release/src/stealgate
#   tests/bench/request_icount.sh /tmp/old/build-release/src/stealgate
set -euo pipefail
BIN=${1:?usage: request_icount.sh STEALGATE_BINARY}
for tool in valgrind callgrind_control callgrind_annotate nginx python3; do
  command -v "$tool" >/dev/null || { echo "request_icount: $tool is missing (apt-get install -y valgrind nginx-light)"; exit 2; }
done
source "$(dirname "$0")/lib.sh"
bench_workdir icount
backend_conf 19141
cat >"$work/sg.yaml" <<EOF2
runtime: { worker_threads: 2 }
admin: { address: 127.0.0.1:19942 }
listeners: [ { name: public, address: 127.0.0.1:18461 } ]
clusters: [ { name: backend, endpoints: [127.0.0.1:19141] } ]
routes: [ { name: all, match: { path_prefix: / }, cluster: backend } ]
logging: { access_log: { enabled: false }, level: warning }
EOF2
nginx -c "$work/backend.conf" -p "$work" &
STEALGATE_IO_DRIVER=epoll valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "$BIN" -c "$work/sg.yaml" \
  >"$work/sg.log" 2>&1 &
for _ in $(seq 100); do curl -sf http://127.0.0.1:18461/ >/dev/null && break; sleep 0.2; done
requests() {
  python3 - "$1" <<'PY'
import socket, sys
n = int(sys.argv[1])
socks = [socket.create_connection(("127.0.0.1", 18461)) for _ in range(8)]
for _ in range(n // 8):
    for s in socks:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    for s in socks:
        buf = b""
        while not buf.endswith(b"hello\n"):
            buf += s.recv(4096)
PY
}
requests 2000
callgrind_control -z >/dev/null
requests 4000
callgrind_control -d >/dev/null
sleep 1
total=$(callgrind_annotate "$(ls -t "$work"/cg.out.* | head -1)" 2>/dev/null | grep -m1 "PROGRAM TOTALS" | awk '{gsub(",", "", $1); print $1}')
echo "$BIN: $((total / 4000)) instructions per request (callgrind, epoll, 4,000 requests)"
