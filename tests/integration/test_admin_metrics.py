"""Admin endpoint and metrics: /healthz /ready /config, the Prometheus text passes
`promtool check metrics`, a real Prometheus server scrapes stealgate and its HTTP API
returns a steal counter and the request counter, and counters move as expected."""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import unittest
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (temp_dir, NOT_IN_THIS_BUILD, TIMEOUT_SCALE, Client, Stealgate, Upstream, config, main,  # noqa: E402
                     request_once, sanitized_binary)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class AdminMetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = Upstream("m1")
        cls.sg = Stealgate(config(
            clusters=f"  - name: app\n    endpoints: [{cls.up.address}]\n",
            routes="""  - name: app
    match: { path_prefix: /app }
    cluster: app
    request_headers: { set: { Authorization: "Bearer s3cr3t-token" } }
  - name: hello
    match: { path: /hello }
    direct_response: { status: 200, body: hi }
"""))

    @classmethod
    def tearDownClass(cls):
        cls.sg.stop()
        cls.up.stop()

    def test_health_ready_config_endpoints(self):
        self.assertEqual(self.sg.admin_get("/healthz")[0], 200)
        self.assertEqual(self.sg.admin_get("/ready")[0], 200)
        status, headers, body = self.sg.admin_get("/config")
        self.assertEqual(status, 200)
        text = body.decode()
        self.assertIn("routes:", text)
        self.assertIn("name: app", text)
        self.assertNotIn("s3cr3t", text, "/config must redact credentials")
        self.assertIn("<redacted>", text)
        self.assertEqual(self.sg.admin_get("/nope")[0], 404)
        self.assertEqual(request_once(self.sg.admin_port, "POST", "/metrics")[0], 405)

    def test_request_counters_by_route_and_class(self):
        # Request counters are exported once non-zero.
        before_app = self.sg.metric("stealgate_http_requests_total", default=0, route="app", method="GET",
                                    code_class="2xx")
        before_none = self.sg.metric("stealgate_http_requests_total", default=0, route="none", method="GET",
                                     code_class="4xx")
        c = Client(self.sg.port)
        for _ in range(7):
            self.assertEqual(c.request("GET", "/app/x").status, 200)
        for _ in range(3):
            self.assertEqual(c.request("GET", "/missing").status, 404)
        self.assertEqual(self.sg.metric("stealgate_http_requests_total", route="app", method="GET", code_class="2xx"),
                         before_app + 7)
        self.assertEqual(self.sg.metric("stealgate_http_requests_total", route="none", method="GET", code_class="4xx"),
                         before_none + 3)
        self.assertGreaterEqual(self.sg.metric("stealgate_http_request_duration_seconds_count", route="app"), 7)
        self.assertGreaterEqual(self.sg.metric("stealgate_upstream_requests_total", cluster="app"), 7)
        self.assertGreaterEqual(self.sg.metric("stealgate_upstream_response_head_seconds_count", cluster="app"), 7)
        # A local upstream answers well within 250 ms (1 s in a sanitizer build): every
        # sample is in that bucket.
        le = "0.25" if TIMEOUT_SCALE <= 1 else "1"
        self.assertEqual(self.sg.metric("stealgate_upstream_response_head_seconds_bucket", cluster="app", le=le),
                         self.sg.metric("stealgate_upstream_response_head_seconds_count", cluster="app"))
        self.assertEqual(self.sg.metric("stealgate_upstream_endpoint_healthy", cluster="app",
                                        endpoint=self.up.address), 1)

    def test_process_metrics_describe_the_process(self):
        """The process collector's standard series, checked against /proc as seen from outside."""
        pid = self.sg.proc.pid
        clients = [Client(self.sg.port) for _ in range(20)]
        for c in clients:
            self.assertEqual(c.request("GET", "/hello").status, 200)
        m = self.sg.metric
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        self.assertLessEqual(abs(m("process_open_fds") - fds), 2, f"{m('process_open_fds')} vs {fds} in /proc")
        with open(f"/proc/{pid}/status") as f:
            vm_rss = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))
        self.assertLess(abs(m("process_resident_memory_bytes") - vm_rss), vm_rss * 0.25)
        self.assertGreater(m("process_virtual_memory_bytes"), m("process_resident_memory_bytes"))
        with open(f"/proc/{pid}/limits") as f:
            soft = next(l.split()[3] for l in f if l.startswith("Max open files"))
        self.assertEqual(m("process_max_fds"), float(soft))
        # Some CPU time to count: /proc counts in 10 ms ticks, and 300 direct responses once
        # came to less than one (0.0 on CI). Requests until a tick shows, for 10 s at most.
        deadline = time.time() + 10 * TIMEOUT_SCALE
        cpu = self.sg.cpu_seconds()
        while cpu == 0 and time.time() < deadline:
            for _ in range(300):
                self.assertEqual(clients[0].request("GET", "/hello").status, 200)
            cpu = self.sg.cpu_seconds()
        self.assertGreater(cpu, 0)
        self.assertLess(abs(m("process_cpu_seconds_total") - cpu), 0.1)
        started = m("process_start_time_seconds")
        self.assertLessEqual(started, time.time() + 1)
        self.assertGreater(started, time.time() - 600, "started within the suite, not at boot")
        for c in clients:
            c.close()

    @unittest.skipIf(sanitized_binary(), NOT_IN_THIS_BUILD + "task memory is plain malloc under AddressSanitizer")
    def test_memory_figures_follow_idle_connections(self):
        """stealgate_executor_task_memory_bytes rises with idle keep-alive connections (each
        holds its task, a 384-byte block, between requests) and falls once they have closed
        and the workers, idle, gave the free slabs back; the malloc heap is exported beside it."""
        def task_memory():
            return self.sg.metric("stealgate_executor_task_memory_bytes")

        n = 400
        before = task_memory()
        clients = [Client(self.sg.port) for _ in range(n)]
        for c in clients:
            self.assertEqual(c.request("GET", "/hello").status, 200)
        held = task_memory()
        self.assertGreaterEqual(held - before, n * 384, f"{before} -> {held} with {n} idle connections")
        self.assertLess(held, self.sg.metric("process_resident_memory_bytes"))
        self.assertGreater(self.sg.metric("stealgate_malloc_heap_bytes", state="in_use"), 0)
        self.assertGreaterEqual(self.sg.metric("stealgate_malloc_heap_bytes", state="free"), 0)

        for c in clients:
            c.close()
        self.sg.wait_for(lambda: self.sg.metric("stealgate_downstream_connections_active") == 0, 5 * TIMEOUT_SCALE,
                         "connections still open")
        # Each worker gives its wholly free slabs back after runtime.idle_memory_reclaim (1 s).
        self.sg.wait_for(lambda: task_memory() <= held - (held - before) / 2, 5 * TIMEOUT_SCALE,
                         f"task memory stayed near {held} after the connections closed")

    def test_promtool_check_metrics(self):
        promtool = shutil.which("promtool")
        if promtool is None:
            self.skipTest("promtool not installed (Debian package prometheus)")
        request_once(self.sg.port, "GET", "/app/warm")
        text = self.sg.metrics()
        r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_real_prometheus_scrapes_and_answers_queries(self):
        prom = shutil.which("prometheus")
        if prom is None:
            self.skipTest("prometheus not installed (Debian package prometheus)")
        for _ in range(5):
            request_once(self.sg.port, "GET", "/hello")
        d = temp_dir("sgprom-")
        port = free_port()
        with open(os.path.join(d, "prometheus.yml"), "w") as f:
            f.write(f"""global:
  scrape_interval: 1s
scrape_configs:
  - job_name: stealgate
    static_configs:
      - targets: ['127.0.0.1:{self.sg.admin_port}']
""")
        p = subprocess.Popen([prom, f"--config.file={d}/prometheus.yml", f"--storage.tsdb.path={d}/data",
                              f"--web.listen-address=127.0.0.1:{port}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            def query(q):
                url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
                with urllib.request.urlopen(url, timeout=5) as r:
                    return json.load(r)["data"]["result"]

            deadline = time.time() + 60
            steals = hello = []
            while time.time() < deadline:
                try:
                    steals = query("stealgate_executor_steals_total")
                    hello = query('stealgate_http_requests_total{route="hello",code_class="2xx"}')
                    if steals and hello:
                        break
                except OSError:
                    pass
                time.sleep(0.5)
            self.assertEqual(len(steals), 2, "one steal series per worker")
            self.assertEqual({s["metric"]["worker"] for s in steals}, {"0", "1"})
            self.assertTrue(hello)
            self.assertGreaterEqual(float(hello[0]["value"][1]), 5)
            up = query('up{job="stealgate"}')
            self.assertEqual(up[0]["value"][1], "1")
        finally:
            p.terminate()
            p.wait(10)
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
