"""Checks exec_bench honours the harness contract (output shape, N=0, every workload).

Not a performance test: it runs each workload once at a small N and checks the line
format `stealgate <workload> <N> <seconds> <ops_per_sec>`.
"""
import os
import subprocess
import sys

binary = sys.argv[1]
workloads = ["spawn_many_local", "spawn_many_remote", "yield_many", "ping_pong", "chained_spawn"]
failures = 0
for w in workloads:
    for n in (0, 20000):
        env = dict(os.environ, WORKERS="2", ITERS="2", WARMUP="1", ENABLE_IO="1")
        out = subprocess.run([binary, w, str(n)], env=env, capture_output=True, text=True, timeout=60)
        lines = out.stdout.strip().splitlines()
        ok = out.returncode == 0 and len(lines) == 2
        for line in lines:
            parts = line.split()
            ok = ok and len(parts) == 5 and parts[0] == "stealgate" and parts[1] == w and parts[2] == str(n)
            ok = ok and float(parts[3]) >= 0.0
        if not ok:
            failures += 1
            print(f"FAIL {w} N={n}: rc={out.returncode} stdout={out.stdout!r} stderr={out.stderr[-500:]!r}")
        else:
            print(f"ok {w} N={n}")
bad = subprocess.run([binary, "no_such_workload", "10"], capture_output=True, text=True)
if bad.returncode != 2:
    failures += 1
    print("FAIL unknown workload should exit 2")
sys.exit(1 if failures else 0)
