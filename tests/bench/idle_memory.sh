#!/usr/bin/env bash
# Where an idle keep-alive connection's memory goes. Not a test: like the `mem` phase of
# ../shared/bench/proxy it holds N keep-alive clients (each sent one GET through stealgate to
# a local nginx and read the reply; 200 set up at a time) and prints the PSS they added per
# connection, then splits that growth by where it lies:
#   task allocator   stealgate_executor_task_memory_bytes: tasks, their records, ring
#                    operations, and the free blocks of the requests' coroutine frames
#   receive buffers  the io_uring rings' provided buffers the burst added (4 KiB each,
#                    never withdrawn; a warm-up has touched those there were before)
#   malloc arenas    resident pages of glibc's worker arenas (and its main heap), from
#                    /proc/PID/smaps; stealgate_malloc_heap_bytes says how much is live
#   rest             everything else (thread stacks touched, libraries, ...)
#
#   apt-get install -y nginx-light        # once
#   tests/bench/idle_memory.sh build-release/src/stealgate
#   N=2000 DRIVER=epoll tests/bench/idle_memory.sh build-release/src/stealgate
#
# Everything listens on 127.0.0.1 (ports 19151, 18471, 19951); the hold lasts HOLD seconds.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-build-release/src/stealgate}
N=${N:-10000}
HOLD=${HOLD:-4}
DRIVER=${DRIVER:-auto}
command -v nginx >/dev/null || { echo "idle_memory: nginx is missing (apt-get install -y nginx-light)"; exit 2; }
ulimit -n $((N + 1000)) 2>/dev/null || { echo "idle_memory: cannot raise the descriptor limit to $((N + 1000))"; exit 2; }
source tests/bench/lib.sh  # (from the repository root, above)
bench_workdir idlemem
backend_conf 19151
cat >"$work/sg.yaml" <<EOF
runtime: { worker_threads: 2, io_driver: $DRIVER }
admin: { address: 127.0.0.1:19951 }
listeners: [ { name: public, address: 127.0.0.1:18471, backlog: 4096, max_connections: $((N + 100)) } ]
clusters: [ { name: backend, endpoints: [127.0.0.1:19151] } ]
routes: [ { name: all, match: { path_prefix: / }, cluster: backend } ]
logging: { access_log: { enabled: false }, level: warning }
EOF
nginx -c "$work/backend.conf" -p "$work" &
"$BIN" -c "$work/sg.yaml" >"$work/sg.log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:18471/ >/dev/null && break; sleep 0.2; done
# Warm-up: 300 requests on 8 connections pass every provided receive buffer through the
# rings once (they are handed out in ring order), so that the buffers' first touch is not
# counted as the connections' memory; then the workers' idle reclaim.
python3 - <<'PY'
import socket
socks = [socket.create_connection(("127.0.0.1", 18471)) for _ in range(8)]
for _ in range(300 // 8):
    for s in socks:
        s.sendall(b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n")
    for s in socks:
        got = b""
        while not got.endswith(b"hello\n"):
            got += s.recv(4096)
for s in socks:
    s.close()
PY
sleep 1.5
python3 - "$pid" "$N" "$HOLD" <<'PY'
import re, socket, sys, threading, time, urllib.request
pid, n, hold = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])

def smaps():
    """(total PSS, PSS of malloc's heaps) in KiB: the main heap and every arena, an anonymous
    mapping followed by the PROT_NONE rest of its 64 MiB reservation."""
    rows, cur = [], None
    for line in open(f"/proc/{pid}/smaps"):
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            f = line.split()
            s, e = (int(x, 16) for x in f[0].split("-"))
            cur = {"size": e - s, "perm": f[1], "name": f[5] if len(f) > 5 else "", "pss": 0}
            rows.append(cur)
        elif line.startswith("Pss:"):
            cur["pss"] = int(line.split()[1])
    heap = sum(r["pss"] for r in rows if r["name"] == "[heap]")
    for a, b in zip(rows, rows[1:]):
        if not a["name"] and not b["name"] and b["perm"].startswith("---") and b["size"] >= 32 << 20:
            heap += a["pss"]
    return sum(r["pss"] for r in rows), heap

def metrics():
    text = urllib.request.urlopen("http://127.0.0.1:19951/metrics", timeout=10).read().decode()
    out = {}
    for m in re.finditer(r'^(stealgate_[a-z_]+)(\{[^}]*\})? (\S+)$', text, re.M):
        key = m.group(1) + (m.group(2) or "")
        out[key] = float(m.group(3))
    return out

def figures():
    pss, heap = smaps()
    m = metrics()
    buffers = sum(v for k, v in m.items() if k.startswith("stealgate_executor_io_uring_receive_buffers{")) * 4
    return {"pss": pss, "tasks": m.get("stealgate_executor_task_memory_bytes", 0) / 1024, "buffers": buffers,
            "heap": heap, "live": m.get('stealgate_malloc_heap_bytes{state="in_use"}', 0) / 1024}

before = figures()
conns, lock, failed = [], threading.Lock(), []
def open_some(count):
    for _ in range(count):
        try:
            s = socket.create_connection(("127.0.0.1", 18471), timeout=10)
            s.sendall(b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n")
            got = b""
            while not got.endswith(b"hello\n"):
                chunk = s.recv(4096)
                if not chunk:
                    raise OSError("closed")
                got += chunk
            with lock:
                conns.append(s)
        except OSError as e:
            failed.append(str(e))
threads = [threading.Thread(target=open_some, args=(n // 200 + (i < n % 200),)) for i in range(200)]
for t in threads: t.start()
for t in threads: t.join()
time.sleep(hold)
held = figures()
k = len(conns)
if k == 0:
    sys.exit(f"idle_memory: no connection held ({failed[:3]})")
d = {key: held[key] - before[key] for key in held}
rest = d["pss"] - d["tasks"] - d["buffers"] - d["heap"]
print(f"{k} idle keep-alive connections held ({len(failed)} failed): PSS +{d['pss']:.0f} KiB, "
      f"{d['pss'] * 1024 / k:.0f} bytes each")
print("| where | KiB | bytes per connection |")
print("|---|---:|---:|")
for name, v in (("task allocator", d["tasks"]), ("receive buffers", d["buffers"]),
                ("malloc arenas", d["heap"]), ("rest", rest)):
    print(f"| {name} | {v:.0f} | {v * 1024 / k:.0f} |")
print(f"malloc live: {held['live']:.0f} KiB held against {before['live']:.0f} KiB before")
PY
