"""Soak: a mixed load through the real stealgate binary and real upstream processes, for a
bounded time, on 127.0.0.1 only. Run it with scripts/soak.sh --duration D.

Load (each kind in its own client threads):
  keepalive  GETs on keep-alive connections            -> app cluster (two endpoints)
  newconn    a new connection per GET                   -> app
  post16k    16 KiB POSTs, echo checked, keep-alive     -> app
  slow       GETs past the slow cluster's limit         -> slow (100 ms, limit 4, queue 8)
  flaky      GETs to an upstream killed and restarted   -> flaky (one endpoint, killed 2 s of every 15 s)
  vanish     clients that close mid-response (1 MiB)    -> app
and a reload (SIGHUP, config rewritten) every 10 s.

Fails on: any status or transport error the design does not explain (a 503 from admission
on `slow`; 502/503/504 on `flaky` inside a kill window; nothing else), a reload that is not
applied, RSS growth of more than 10% between the end of warm-up (a third of the run) and
the end, any descriptor growth over the same span (both sampled after the load pauses and
pooled connections have expired), or stealgate not exiting 0 on SIGTERM.
"""
import argparse
import collections
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from harness import Client, Stealgate, Upstream, config  # noqa: E402

POST_BODY = b"p" * (16 * 1024)
POOL_IDLE = 1.0  # cluster idle_timeout (s): pooled connections expire before each sample


def gateway_config(app, slow, flaky, generation):
    clusters = f"""  - name: app
    endpoints: [{app[0].address}, {app[1].address}]
    lb: least_request
    idle_timeout: {int(POOL_IDLE * 1000)}ms
  - name: slow
    endpoints: [{slow.address}]
    max_concurrent_requests: 4
    idle_timeout: {int(POOL_IDLE * 1000)}ms
  - name: flaky
    endpoints: [{flaky.address}]
    connect_timeout: 500ms
    idle_timeout: {int(POOL_IDLE * 1000)}ms
    outlier_detection: {{ consecutive_failures: 0 }}
"""
    routes = f"""  - name: version
    match: {{ path: /version }}
    direct_response: {{ status: 200, body: "generation {generation}" }}
  - name: slow
    match: {{ path_prefix: /slow }}
    cluster: slow
    timeout: 5s
  - name: flaky
    match: {{ path_prefix: /flaky }}
    cluster: flaky
    timeout: 2s
  - name: app
    match: {{ path_prefix: / }}
    cluster: app
"""
    return config(clusters=clusters, routes=routes, logging="access_log: false",
                  extra="limits:\n  max_queued_requests: 8\n  queue_timeout: 200ms\n")


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = collections.Counter()
        self.unexplained = []
        self.flaky_results = []  # (start, end, status or exception text)

    def ok(self, kind, status):
        with self.lock:
            self.counts[(kind, status)] += 1

    def bad(self, kind, what):
        with self.lock:
            self.counts[(kind, "unexplained")] += 1
            if len(self.unexplained) < 20:
                self.unexplained.append(f"{kind}: {what}")


class Soak:
    def __init__(self, duration):
        self.duration = duration
        self.stop = threading.Event()
        self.paused = threading.Event()  # set: load threads hold still (samples)
        self.tally = Tally()
        self.kill_windows = []  # (killed_at, restarted_at)
        self.windows_lock = threading.Lock()
        self.app = [Upstream("app-a", keep_log=False), Upstream("app-b", keep_log=False)]
        self.slow = Upstream("slow", delay_ms=100, keep_log=False)
        self.flaky = Upstream("flaky", keep_log=False)
        self.generation = 0
        self.sg = Stealgate(gateway_config(self.app, self.slow, self.flaky, self.generation))

    # --- load -------------------------------------------------------------------------

    def hold(self):
        while self.paused.is_set() and not self.stop.is_set():
            time.sleep(0.01)

    def keepalive(self, kind, path, method="GET", body=b"", check=None):
        c = None
        while not self.stop.is_set():
            self.hold()
            try:
                if c is None:
                    c = Client(self.sg.port, timeout=10)
                r = c.request(method, path, body=body)
                if r.status == 200 and (check is None or check(r)):
                    self.tally.ok(kind, 200)
                else:
                    self.tally.bad(kind, f"status {r.status} for {method} {path}")
                if (r.header("connection") or "").lower() == "close":
                    c.close()
                    c = None
            except (OSError, EOFError, ValueError) as e:
                self.tally.bad(kind, f"{type(e).__name__}: {e}")
                c = None
        if c is not None:
            c.close()

    def newconn(self):
        while not self.stop.is_set():
            self.hold()
            c = None
            try:
                c = Client(self.sg.port, timeout=10)
                r = c.request("GET", "/newconn", headers=[("Connection", "close")])
                (self.tally.ok if r.status == 200 else self.tally.bad)("newconn", r.status if r.status == 200
                                                                       else f"status {r.status}")
            except (OSError, EOFError, ValueError) as e:
                self.tally.bad("newconn", f"{type(e).__name__}: {e}")
            finally:
                if c is not None:
                    c.close()

    def slow_clients(self):
        while not self.stop.is_set():
            self.hold()
            try:
                c = Client(self.sg.port, timeout=10)
                r = c.request("GET", "/slow", headers=[("Connection", "close")])
                c.close()
                if r.status in (200, 503):  # 503: admission (limit 4, queue 8, 200 ms)
                    self.tally.ok("slow", r.status)
                else:
                    self.tally.bad("slow", f"status {r.status}")
            except (OSError, EOFError, ValueError) as e:
                self.tally.bad("slow", f"{type(e).__name__}: {e}")

    def flaky_clients(self):
        while not self.stop.is_set():
            self.hold()
            start = time.monotonic()
            try:
                c = Client(self.sg.port, timeout=10)
                r = c.request("GET", "/flaky", headers=[("Connection", "close")])
                c.close()
                outcome = r.status
            except (OSError, EOFError, ValueError) as e:
                outcome = f"{type(e).__name__}: {e}"
            with self.tally.lock:
                self.tally.flaky_results.append((start, time.monotonic(), outcome))
            if outcome != 200:
                time.sleep(0.02)

    def vanish(self):
        while not self.stop.is_set():
            self.hold()
            try:
                c = Client(self.sg.port, timeout=10)
                c.send(b"GET /big?n=1048576 HTTP/1.1\r\nHost: soak\r\n\r\n")
                got = 0
                while got < 64 * 1024:
                    data = c.sock.recv(16384)
                    if not data:
                        break
                    got += len(data)
                c.close()  # mid-response: stealgate must drop the exchange, not leak it
                if got >= 64 * 1024:
                    self.tally.ok("vanish", 200)
                else:
                    self.tally.bad("vanish", f"response ended after {got} bytes")
            except (OSError, EOFError, ValueError) as e:
                self.tally.bad("vanish", f"{type(e).__name__}: {e}")
            time.sleep(0.05)

    # --- chaos ------------------------------------------------------------------------

    def chaos(self):
        """Kills the flaky upstream for 2 s of every 15 s; reloads every 10 s."""
        t0 = time.monotonic()
        next_kill, next_reload = t0 + 5, t0 + 10
        while not self.stop.wait(0.05):
            now = time.monotonic()
            if now >= next_kill and not self.paused.is_set():
                killed = time.monotonic()
                self.flaky.stop()
                self.stop.wait(2)
                self.flaky.restart()
                with self.windows_lock:
                    self.kill_windows.append((killed, time.monotonic()))
                next_kill = killed + 15
            if now >= next_reload and not self.paused.is_set():
                self.generation += 1
                ok = self.sg.reload(gateway_config(self.app, self.slow, self.flaky, self.generation))
                status, _, vbody = request_version(self.sg.port)
                if not ok or status != 200 or vbody != f"generation {self.generation}".encode():
                    self.tally.bad("reload", f"generation {self.generation} not applied ({status} {vbody!r})")
                else:
                    self.tally.ok("reload", 200)
                next_reload = now + 10

    # --- samples ----------------------------------------------------------------------

    def sample(self):
        """RSS (KiB) and open descriptors with the load paused and upstream pools expired."""
        self.paused.set()
        time.sleep(POOL_IDLE + 1.5)
        rss = self.sg.rss_kib()
        fds = len(os.listdir(f"/proc/{self.sg.proc.pid}/fd"))
        self.paused.clear()
        return rss, fds

    def explain_flaky(self):
        grace = 1.0  # a request in flight when the kill happened ends up to ~1 s later
        for start, end, outcome in self.tally.flaky_results:
            if outcome == 200:
                self.tally.ok("flaky", 200)
                continue
            inside = any(start <= r + grace and end >= k - 0.05 for k, r in self.kill_windows)
            if inside and outcome in (502, 503, 504):
                self.tally.ok("flaky", outcome)
            else:
                self.tally.bad("flaky", f"{outcome}" + ("" if inside else " outside a kill window"))

    def run(self):
        threads = [threading.Thread(target=self.keepalive, args=("keepalive", "/ka"), daemon=True) for _ in range(2)]
        threads.append(threading.Thread(target=self.keepalive, daemon=True,
                                        args=("post16k", "/post", "POST", POST_BODY,
                                              lambda r: r.json()["body"] == POST_BODY.decode())))
        threads.append(threading.Thread(target=self.newconn, daemon=True))
        threads += [threading.Thread(target=self.slow_clients, daemon=True) for _ in range(12)]
        threads.append(threading.Thread(target=self.flaky_clients, daemon=True))
        threads.append(threading.Thread(target=self.vanish, daemon=True))
        chaos = threading.Thread(target=self.chaos, daemon=True)
        for t in threads:
            t.start()
        chaos.start()
        warmup = self.duration / 3
        time.sleep(warmup)
        rss0, fds0 = self.sample()
        time.sleep(max(0.0, self.duration - warmup))
        self.stop.set()
        for t in threads:
            t.join(15)
        chaos.join(15)
        rss1, fds1 = self.sample()
        self.explain_flaky()
        rc = self.sg.stop()
        for u in self.app + [self.slow, self.flaky]:
            u.stop()
        return rss0, fds0, rss1, fds1, rc


def request_version(port):
    c = Client(port)
    try:
        r = c.request("GET", "/version", headers=[("Connection", "close")])
        return r.status, r.headers, r.body
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=60)
    args = ap.parse_args()
    soak = Soak(args.duration)
    rss0, fds0, rss1, fds1, rc = soak.run()
    t = soak.tally
    kinds = sorted({k for k, _ in t.counts})
    for k in kinds:
        parts = ", ".join(f"{s}: {n}" for (kk, s), n in sorted(t.counts.items(), key=str) if kk == k)
        print(f"soak {k}: {parts}")
    growth = (rss1 - rss0) * 100.0 / rss0 if rss0 else 0.0
    print(f"soak: RSS {rss0} KiB after warm-up, {rss1} KiB at the end ({growth:+.1f}%); "
          f"descriptors {fds0} -> {fds1}; kill windows {len(soak.kill_windows)}; exit status {rc}")
    failures = list(t.unexplained)
    if growth > 10.0:
        failures.append(f"RSS grew {growth:.1f}% (> 10%)")
    if fds1 > fds0:
        failures.append(f"descriptors grew {fds0} -> {fds1}")
    if rc != 0:
        failures.append(f"stealgate exited with {rc}")
    if not soak.kill_windows:
        failures.append("the run was too short to kill the flaky upstream once")
    if t.counts[("reload", 200)] == 0:
        failures.append("no reload happened")
    for f in failures:
        print(f"soak FAILED: {f}")
    print(f"soak: {'1 passed, 0 failed' if not failures else '0 passed, 1 failed'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
