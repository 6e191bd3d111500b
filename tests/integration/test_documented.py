"""What config/README.md promises and no other suite exercised: connect timeouts, the retry
conditions, an ejected endpoint coming back, drain_timeout running out, a listener removed
while a request on it is in flight, send_timeout, the text access log, admin.enabled,
runtime keys, ring_hash on the client address, and the order of response header rules."""
import os
import re
import select
import signal
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import temp_dir, TIMEOUT_SCALE, Client, Stealgate, Upstream, config, main, request_once  # noqa: E402


def app_route(extra=""):
    return "  - name: app\n    match: { path_prefix: / }\n    cluster: app\n" + extra


class Resetter:
    """An upstream that accepts and resets every connection before answering."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted = 0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            c.recv(65536)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            c.close()

    def stop(self):
        self.sock.close()


class Blackhole:
    """A listener whose accept queue is full: further SYNs are dropped, so a connect to it
    can only time out."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.fillers = []
        for _ in range(2):  # backlog 0 still takes one; the next handshake may complete too
            f = socket.socket()
            f.setblocking(False)
            f.connect_ex(self.sock.getsockname())
            self.fillers.append(f)
        # A filler's handshake completed: the accept queue is full from here on.
        _, done, _ = select.select([], self.fillers, [], 5)
        if not done:
            raise RuntimeError("no filler connection completed its handshake")

    def stop(self):
        for f in self.fillers:
            f.close()
        self.sock.close()


class UpstreamFailuresTest(unittest.TestCase):
    def gateway(self, endpoints, route_extra="", cluster_extra=""):
        return Stealgate(config(
            clusters=f"  - name: app\n    endpoints: [{endpoints}]\n{cluster_extra}",
            routes=app_route(route_extra)))

    def test_connect_timeout_is_a_504(self):
        hole = Blackhole()
        sg = self.gateway(hole.address, cluster_extra="    connect_timeout: 300ms\n")
        try:
            t0 = time.time()
            status, _, _ = request_once(sg.port, "GET", "/")
            self.assertEqual(status, 504)
            self.assertGreaterEqual(time.time() - t0, 0.25)
            self.assertEqual(sg.metric("stealgate_upstream_connect_errors_total", cluster="app"), 1)
        finally:
            sg.stop()
            hole.stop()

    def test_reset_is_retried_when_configured(self):
        rst, good = Resetter(), Upstream("good")
        sg = self.gateway(f"{rst.address}, {good.address}", "    retries: { attempts: 1, on: [reset] }\n",
                          "    outlier_detection: { consecutive_failures: 0 }\n")
        try:
            statuses = [request_once(sg.port, "GET", "/")[0] for _ in range(6)]
            self.assertEqual(statuses, [200] * 6)
            self.assertGreaterEqual(rst.accepted, 3)
            self.assertEqual(sg.metric("stealgate_upstream_retries_total", cluster="app"), rst.accepted)
        finally:
            sg.stop(), rst.stop(), good.stop()

    def test_reset_is_not_retried_by_default(self):
        rst, good = Resetter(), Upstream("good")
        sg = self.gateway(f"{rst.address}, {good.address}", cluster_extra="    outlier_detection: { consecutive_failures: 0 }\n")
        try:
            statuses = [request_once(sg.port, "GET", "/")[0] for _ in range(6)]
            self.assertEqual(sorted(statuses), [200] * 3 + [502] * 3)
        finally:
            sg.stop(), rst.stop(), good.stop()

    def test_gateway_error_is_retried_when_configured(self):
        bad, good = Upstream("bad", fail_status=502), Upstream("good")
        sg = self.gateway(f"{bad.address}, {good.address}", "    retries: { attempts: 1, on: [gateway_error] }\n",
                          "    outlier_detection: { consecutive_failures: 0 }\n")
        try:
            self.assertEqual([request_once(sg.port, "GET", "/")[0] for _ in range(6)], [200] * 6)
            self.assertEqual(sg.metric("stealgate_upstream_retries_total", cluster="app"), len(bad.log()))
            # 500 is not a gateway error: passed on.
            bad500 = Upstream("bad500", fail_status=500)
            sg.reload(config(clusters=f"  - name: app\n    endpoints: [{bad500.address}]\n",
                             routes=app_route("    retries: { attempts: 1, on: [gateway_error] }\n")))
            self.assertEqual(request_once(sg.port, "GET", "/")[0], 500)
            self.assertEqual(len(bad500.log()), 1)
            bad500.stop()
        finally:
            sg.stop(), bad.stop(), good.stop()

    def test_timeout_is_retried_when_configured(self):
        slow, good = Upstream("slow", delay_ms=2000), Upstream("good")
        sg = self.gateway(f"{slow.address}, {good.address}",
                          "    timeout: 300ms\n    retries: { attempts: 1, on: [timeout] }\n",
                          "    outlier_detection: { consecutive_failures: 0 }\n")
        try:
            statuses = [request_once(sg.port, "GET", "/")[0] for _ in range(4)]
            self.assertEqual(statuses, [200] * 4)
            self.assertGreaterEqual(sg.metric("stealgate_upstream_timeouts_total", cluster="app"), 2)
        finally:
            sg.stop(), slow.stop(), good.stop()

    def test_an_ejected_endpoint_returns_after_its_ejection_time(self):
        x, y = Upstream("x", fail_status=500), Upstream("y")
        sg = self.gateway(f"{x.address}, {y.address}", cluster_extra=(
            "    outlier_detection: { consecutive_failures: 2, base_ejection_time: 2s, max_ejection_percent: 50 }\n"))
        try:
            c = Client(sg.port)
            for _ in range(6):
                c.request("GET", "/")
            self.assertEqual(sg.metric("stealgate_upstream_endpoint_healthy", cluster="app", endpoint=x.address), 0)
            ejected_at = time.time()
            x.fail_status = 0
            x.restart()  # healthy again, same port
            while time.time() - ejected_at < 0.8:  # still ejected (for 2 s): everything goes to y
                self.assertEqual(c.request("GET", "/").header("x-upstream"), "y")
            sg.wait_for(lambda: sg.metric("stealgate_upstream_endpoint_healthy", cluster="app",
                                          endpoint=x.address) == 1, 5, "x never came back")
            seen = {c.request("GET", "/").header("x-upstream") for _ in range(6)}
            self.assertEqual(seen, {"x", "y"})
            c.close()
        finally:
            sg.stop(), x.stop(), y.stop()


class LifecycleTest(unittest.TestCase):
    def test_drain_timeout_running_out_ends_the_process(self):
        up = Upstream("d")
        sg = Stealgate(config(clusters=f"  - name: app\n    endpoints: [{up.address}]\n", routes=app_route(),
                              extra="drain_timeout: 500ms\n"))
        c = Client(sg.port, timeout=15)
        c.send(b"GET /slow?ms=8000 HTTP/1.1\r\nHost: h\r\n\r\n")
        sg.wait_for(lambda: any(e["target"].startswith("/slow") for e in up.log()), 5, "slow request not in flight")
        t0 = time.time()
        sg.proc.send_signal(signal.SIGTERM)
        self.assertEqual(sg.proc.wait(10), 0)
        took = time.time() - t0
        self.assertGreaterEqual(took, 0.45, "drain must wait for the in-flight request")
        self.assertLess(took, 4 * TIMEOUT_SCALE, "drain_timeout (500 ms) must bound the wait")
        self.assertEqual(c.read_to_close(), b"")
        c.close()
        sg.stop()
        up.stop()

    def test_listener_removed_by_reload_finishes_in_flight_requests(self):
        up = Upstream("l")
        two = "  - name: public\n    address: 127.0.0.1:0\n  - name: second\n    address: 127.0.0.1:0\n"
        sg = Stealgate(config(listeners=two, clusters=f"  - name: app\n    endpoints: [{up.address}]\n",
                              routes=app_route()))
        try:
            second = sg.ports["second"]
            c = Client(second, timeout=10)
            c.send(b"GET /slow?ms=1500 HTTP/1.1\r\nHost: h\r\n\r\n")
            sg.wait_for(lambda: any(e["target"].startswith("/slow") for e in up.log()), 5, "not in flight")
            self.assertTrue(sg.reload(config(clusters=f"  - name: app\n    endpoints: [{up.address}]\n",
                                             routes=app_route())))
            with self.assertRaises(OSError):
                socket.create_connection(("127.0.0.1", second), timeout=1)
            r = c.read_response()
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, b"slow l\n")
            c.close()
            self.assertEqual(request_once(sg.port, "GET", "/")[0], 200)
        finally:
            sg.stop(), up.stop()

    def test_send_timeout_closes_a_client_that_stops_reading(self):
        up = Upstream("s")
        lst = "  - name: public\n    address: 127.0.0.1:0\n    send_timeout: 300ms\n"
        sg = Stealgate(config(listeners=lst, clusters=f"  - name: app\n    endpoints: [{up.address}]\n",
                              routes=app_route()))
        try:
            c = Client(sg.port, timeout=10)
            c.send(b"GET /big?n=104857600 HTTP/1.1\r\nHost: h\r\n\r\n")
            sg.wait_log(r"client write failed", 10 * TIMEOUT_SCALE)
            got = len(c.read_to_close())
            self.assertLess(got, 100 * 1024 * 1024, "the response cannot have been completed")
            c.close()
        finally:
            sg.stop(), up.stop()

    def test_admin_disabled_serves_no_admin_endpoint(self):
        sg = Stealgate(config(routes="  - name: d\n    direct_response: { status: 200, body: ok }\n",
                              admin="127.0.0.1:0\n  enabled: false"), wait_ready=False)
        try:
            sg.wait_for(lambda: sg.ports, 10, "listener did not start")
            self.assertEqual(request_once(sg.port, "GET", "/")[0], 200)
            self.assertIsNone(sg.admin_port)
            self.assertFalse(any("admin endpoint" in l for l in sg.logs()), sg.logs())
        finally:
            sg.stop()

    def test_a_full_log_queue_drops_lines_and_counts_them(self):
        # The access log goes to a FIFO whose reader does not read: once the pipe is full the
        # log thread blocks, the queue (16 lines) fills, and further lines must be dropped
        # (and counted) while requests go on being served.
        d = temp_dir()
        fifo = os.path.join(d, "access.fifo")
        os.mkfifo(fifo)
        rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        sg = Stealgate(config(routes="  - name: d\n    direct_response: { status: 200, body: ok }\n",
                              logging=f"queue_size: 16\n  access_log: {{ enabled: true, path: {fifo} }}"))
        draining = threading.Event()

        def drain():
            while not draining.is_set() or sg.proc.poll() is None:
                select.select([rfd], [], [], 0.1)
                try:
                    if not os.read(rfd, 1 << 16) and draining.is_set():
                        time.sleep(0.01)
                except BlockingIOError:
                    pass
                if sg.proc.poll() is not None:
                    return

        try:
            c = Client(sg.port)
            for _ in range(2000):  # ~150 bytes a line: the 64 KiB pipe is full after ~450
                self.assertEqual(c.request("GET", "/").status, 200)
            c.close()
            self.assertGreater(sg.metric("stealgate_log_lines_dropped_total"), 0)
        finally:
            draining.set()
            t = threading.Thread(target=drain, daemon=True)
            t.start()
            sg.stop()
            t.join(5)
            os.close(rfd)

    def test_runtime_keys_from_yaml_take_effect(self):
        sg = Stealgate(config(routes="  - name: d\n    direct_response: { status: 200 }\n").replace(
            "runtime:\n  worker_threads: 2\n",
            "runtime:\n  worker_threads: 3\n  global_queue_interval: 31\n  event_interval: 17\n  coop_budget: 64\n"))
        try:
            self.assertEqual(sg.metric("stealgate_executor_workers"), 3)
            text = sg.admin_get("/config")[2].decode()
            for line in ("worker_threads: 3", "global_queue_interval: 31", "event_interval: 17", "coop_budget: 64"):
                self.assertIn(line, text)
        finally:
            sg.stop()


class RoutingRulesTest(unittest.TestCase):
    def test_ring_hash_on_the_client_address_is_sticky(self):
        ups = [Upstream(n) for n in ("a", "b", "c")]
        sg = Stealgate(config(clusters=f"  - name: app\n    endpoints: [{', '.join(u.address for u in ups)}]\n"
                                       "    lb: ring_hash\n", routes=app_route()))
        try:
            for source in ("127.0.0.1", "127.0.0.2", "127.0.0.3"):
                seen = set()
                for _ in range(8):
                    s = socket.socket()
                    s.bind((source, 0))
                    s.connect(("127.0.0.1", sg.port))
                    c = Client.__new__(Client)
                    c.sock, c.buf = s, b""
                    seen.add(c.request("GET", "/", headers=[("Connection", "close")]).header("x-upstream"))
                    c.close()
                self.assertEqual(len(seen), 1, f"{source} went to {seen}")
        finally:
            sg.stop()
            for u in ups:
                u.stop()

    def test_response_header_rules_apply_remove_then_set_then_add(self):
        up = Upstream("h")
        sg = Stealgate(config(clusters=f"  - name: app\n    endpoints: [{up.address}]\n", routes=app_route(
            "    response_headers:\n"
            "      remove: [X-Upstream, X-Tag2]\n"
            "      set: { Content-Type: text/x-set, X-Tag: s, X-Tag2: s2 }\n"
            "      add: { X-Tag: a, X-Upstream: added }\n")))
        try:
            c = Client(sg.port)
            r = c.request("GET", "/")
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header_all("content-type"), ["text/x-set"])  # set replaces the upstream's
            self.assertEqual(r.header_all("x-tag"), ["s", "a"])               # set, then add
            self.assertEqual(r.header_all("x-tag2"), ["s2"])                  # removed, then set
            self.assertEqual(r.header_all("x-upstream"), ["added"])           # removed, then added
            c.close()
        finally:
            sg.stop(), up.stop()

    def test_text_access_log_lines_parse(self):
        up = Upstream("t")
        sg = Stealgate(config(clusters=f"  - name: app\n    endpoints: [{up.address}]\n", routes=app_route()))
        try:
            request_once(sg.port, "GET", "/logged?x=1", headers=[("X-Request-Id", "req-42")])
            pattern = (r'(?P<client>127\.0\.0\.1:\d+) "(?P<method>GET) (?P<target>/logged\?x=1) HTTP/1\.1" '
                       r'(?P<status>200) (?P<bytes>\d+) route=(?P<route>app) cluster=(?P<cluster>app) '
                       r'endpoint=(?P<endpoint>127\.0\.0\.1:\d+) (?P<ms>[\d.]+)ms attempts=(?P<attempts>1) '
                       r'id=(?P<id>req-42)$')
            sg.wait_log(pattern)
            m = next(re.search(pattern, l) for l in sg.logs() if re.search(pattern, l))
            self.assertEqual(m.group("endpoint"), up.address)
            self.assertGreater(int(m.group("bytes")), 0)
            self.assertLess(float(m.group("ms")), 10_000)
        finally:
            sg.stop(), up.stop()


if __name__ == "__main__":
    main()
