"""Operating stealgate: config validation from the CLI, hot reload (under load, invalid
file, listeners added/removed), graceful drain, systemd notification, access logs, the
systemd unit."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import temp_dir, TIMEOUT_SCALE, BIN, Client, RefusingAddress, Stealgate, Upstream, config, listening_sockets, main, request_once, tls_client_context, tls_public_listener  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def app_routes(extra=""):
    return extra + "  - name: app\n    match: { path_prefix: / }\n    cluster: app\n"


class LoadGenerator:
    """Closed-loop clients hammering one path until stopped; counts failures."""

    def __init__(self, port, path="/", clients=4):
        self.port = port
        self.path = path
        self.stop_flag = threading.Event()
        self.ok = 0
        self.failures = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(clients)]
        for t in self.threads:
            t.start()

    def run(self):
        c = None
        while not self.stop_flag.is_set():
            try:
                if c is None:
                    c = Client(self.port, timeout=5)
                r = c.request("GET", self.path)
                with self.lock:
                    if r.status == 200:
                        self.ok += 1
                    else:
                        self.failures.append(f"status {r.status}")
                if r.header("connection") == "close":
                    c.close()
                    c = None
            except (OSError, EOFError) as e:
                # A keep-alive connection closed by the server between requests is normal
                # HTTP/1.1 behaviour (clients retry on a new connection); a failure is a
                # request that got no response on a connection that carried no other.
                with self.lock:
                    self.failures.append(f"{type(e).__name__}: {e}")
                c = None

    def finish(self):
        self.stop_flag.set()
        for t in self.threads:
            t.join(10)
        return self.ok, self.failures


class CheckConfigTest(unittest.TestCase):
    def run_bin(self, *args):
        return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=30)

    def test_default_config_is_valid_and_printable(self):
        path = os.path.join(ROOT, "config", "stealgate.yaml")
        r = self.run_bin("--check-config", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("is valid", r.stdout)
        p = self.run_bin("--print-config", "-c", path)
        self.assertEqual(p.returncode, 0)
        self.assertIn("header_timeout: 10s", p.stdout)
        d = temp_dir()
        with open(os.path.join(d, "printed.yaml"), "w") as f:
            f.write(p.stdout)
        self.assertEqual(self.run_bin("-t", os.path.join(d, "printed.yaml")).returncode, 0)

    def test_every_stealgate_config_in_the_repository_is_valid(self):
        """config/, tests/bench/ and the configuration embedded in the Kubernetes ConfigMap."""
        found = []
        for sub in ("config", os.path.join("tests", "bench")):
            for name in sorted(os.listdir(os.path.join(ROOT, sub))):
                if name.endswith(".yaml"):
                    found.append(os.path.join(ROOT, sub, name))
        with open(os.path.join(ROOT, "deploy", "k8s", "configmap.yaml")) as f:
            lines = f.read().split("\n")
        start = lines.index("  stealgate.yaml: |") + 1
        embedded = []
        for line in lines[start:]:
            if line.strip() and not line.startswith("    "):
                break
            embedded.append(line[4:])
        d = temp_dir()
        k8s = os.path.join(d, "configmap-stealgate.yaml")
        with open(k8s, "w") as f:
            f.write("\n".join(embedded))
        found.append(k8s)
        self.assertGreaterEqual(len(found), 3)
        for path in found:
            r = self.run_bin("--check-config", path)
            self.assertEqual(r.returncode, 0, f"{path}: {r.stderr}")

    def test_invalid_config_names_position_and_field(self):
        d = temp_dir()
        path = os.path.join(d, "bad.yaml")
        with open(path, "w") as f:
            f.write("listeners:\n  - address: 127.0.0.1:0\nclusters:\n  - name: api\n    endpoints: [127.0.0.1:1]\n"
                    "routes:\n  - match: { path_prefix: / }\n    cluster: apii\n  - match: { pth: / }\n"
                    "    direct_response: { status: 200 }\n")
        r = self.run_bin("--check-config", path)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"{path}:8:14: routes[0].cluster: unknown cluster \"apii\" (did you mean \"api\"?)", r.stderr)
        self.assertIn(f"{path}:9:14: routes[1].match.pth: unknown key \"pth\" (did you mean \"path\"?)", r.stderr)
        self.assertIn("is invalid (2 errors)", r.stderr)
        # And the daemon refuses to start on it.
        s = self.run_bin("--config", path)
        self.assertEqual(s.returncode, 1)

    def test_names_are_looked_up_as_the_start_would(self):
        # systemd's ExecStartPre runs --check-config: it must refuse what the start refuses.
        # (.invalid never resolves: RFC 6761 §6.4.)
        d = temp_dir()
        base = "listeners:\n  - address: 127.0.0.1:0\nclusters:\n  - name: api\n    endpoints: [nowhere.invalid:80]\n"
        routes = "routes:\n  - match: { path_prefix: / }\n    cluster: api\n"
        fixed, refreshed = os.path.join(d, "fixed.yaml"), os.path.join(d, "refreshed.yaml")
        with open(fixed, "w") as f:
            f.write(base + "    dns_refresh: 0s\n" + routes)
        with open(refreshed, "w") as f:
            f.write(base + routes)
        r = self.run_bin("--check-config", fixed)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn('error: cluster "api" endpoint nowhere.invalid:80: cannot resolve "nowhere.invalid"', r.stderr)
        self.assertIn("(with dns_refresh: 0 a name must resolve at load)", r.stderr)
        self.assertIn("cannot start (1 error)", r.stderr)
        self.assertEqual(self.run_bin("--config", fixed).returncode, 1, "the start takes what the check refused")
        # Looked up again while serving, such a name is only a warning: the start takes it.
        r = self.run_bin("--check-config", refreshed)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('warning: cluster "api" endpoint nowhere.invalid:80: cannot resolve', r.stderr)
        self.assertIn("it gets no requests until the name resolves", r.stderr)
        self.assertIn("is valid", r.stdout)

    def test_cli_usage_errors(self):
        self.assertEqual(self.run_bin("--frobnicate").returncode, 2)
        self.assertEqual(self.run_bin("--config").returncode, 2)
        h = self.run_bin("--help")
        self.assertEqual(h.returncode, 0)
        self.assertIn("--check-config", h.stdout)
        v = self.run_bin("--version")
        self.assertRegex(v.stdout, r"^stealgate \d+\.\d+\.\d+")


class ReloadTest(unittest.TestCase):
    def setUp(self):
        self.up = Upstream("r1")
        self.cfg = lambda extra="": config(
            clusters=f"  - name: app\n    endpoints: [{self.up.address}]\n",
            routes=app_routes(extra))
        self.sg = Stealgate(self.cfg())

    def tearDown(self):
        self.assertEqual(self.sg.stop(), 0)
        self.up.stop()

    def test_reload_under_load_loses_no_request_and_new_route_is_live(self):
        load = LoadGenerator(self.sg.port, "/steady", clients=4)
        self.sg.wait_for(lambda: load.ok >= 20, 5 * TIMEOUT_SCALE, "the load did not start")
        new_route = "  - name: hello\n    match: { path: /hello }\n    direct_response: { status: 200, body: \"new route\\n\" }\n"
        for i in range(5):
            self.assertTrue(self.sg.reload(self.cfg(new_route if i % 2 == 0 else "")))
            served = load.ok
            self.sg.wait_for(lambda: load.ok >= served + 5, 5 * TIMEOUT_SCALE, f"no request served after reload {i}")
        self.assertTrue(self.sg.reload(self.cfg(new_route)))
        after_last = load.ok
        self.sg.wait_for(lambda: load.ok >= after_last + 20, 5 * TIMEOUT_SCALE, "the load stopped after the reload")
        ok, failures = load.finish()
        self.assertGreater(ok, 50)
        self.assertEqual(failures, [])
        status, _, body = request_once(self.sg.port, "GET", "/hello")
        self.assertEqual((status, body), (200, b"new route\n"))
        self.assertEqual(self.sg.metric("stealgate_config_reloads_total", result="success"), 6)

    def test_invalid_reload_keeps_old_config_serving(self):
        before = request_once(self.sg.port, "GET", "/x")[0]
        self.assertEqual(before, 200)
        # The start counts as a successful load: the gauges do not wait for a first reload.
        self.assertEqual(self.sg.metric("stealgate_config_last_reload_successful"), 1)
        loaded_at = self.sg.metric("stealgate_config_last_reload_success_timestamp_seconds")
        self.assertLessEqual(abs(loaded_at - time.time()), 60)
        self.sg.write_config(self.cfg() + "bogus_key: 1\n")
        self.assertFalse(self.sg.reload())
        self.sg.wait_log(r"stealgate\.yaml:\d+:1: bogus_key: unknown key \"bogus_key\"")
        self.sg.wait_log(r"reload rejected")
        self.assertEqual(request_once(self.sg.port, "GET", "/x")[0], 200)
        self.assertEqual(self.sg.metric("stealgate_config_reloads_total", result="failure"), 1)
        # The rejected file stays visible (a restart would fail on it), not only as a count.
        self.assertEqual(self.sg.metric("stealgate_config_last_reload_successful"), 0)
        self.assertEqual(self.sg.metric("stealgate_config_last_reload_success_timestamp_seconds"), loaded_at)
        # A new endpoint whose name does not resolve is refused at a reload (likely a typo, and
        # the previous configuration can go on serving); the start would wait for it instead.
        self.assertFalse(self.sg.reload(self.cfg().replace(self.up.address, "no-such-host.invalid:80")))
        self.sg.wait_log(r"endpoint no-such-host\.invalid:80: cannot resolve .*"
                         r"\(a new endpoint's name must resolve at a reload\)")
        self.assertEqual(request_once(self.sg.port, "GET", "/x")[0], 200)
        self.assertEqual(self.sg.metric("stealgate_config_reloads_total", result="failure"), 2)
        # A good file clears it.
        self.assertTrue(self.sg.reload(self.cfg()))
        self.assertEqual(self.sg.metric("stealgate_config_last_reload_successful"), 1)

    def test_listeners_added_and_removed_without_touching_the_others(self):
        keep = Client(self.sg.port)
        self.assertEqual(keep.request("GET", "/a").status, 200)
        two = ("  - name: public\n    address: 127.0.0.1:0\n  - name: second\n    address: 127.0.0.1:0\n")
        yaml = config(listeners=two, clusters=f"  - name: app\n    endpoints: [{self.up.address}]\n",
                      routes=app_routes())
        # The first listener keeps its configured address 127.0.0.1:0, hence its socket.
        self.assertTrue(self.sg.reload(yaml))
        self.sg.wait_for(lambda: "second" in self.sg.ports, 5, "second listener not bound")
        second = self.sg.ports["second"]
        self.assertEqual(request_once(second, "GET", "/b")[0], 200)
        self.assertEqual(keep.request("GET", "/c").status, 200)  # existing connection untouched


class SocketPerWorkerTest(unittest.TestCase):
    """reuse_port: a listening socket per worker, each accepted by a loop pinned to it."""

    def listener_tasks(self, sg):
        tasks = json.loads(sg.admin_get("/debug/tasks")[2])["tasks"]
        return sorted((t for t in tasks if t["kind"] == "listener"), key=lambda t: t["name"])

    def test_each_worker_accepts_on_a_socket_of_its_own(self):
        one = Stealgate(config(listeners="  - name: public\n    address: 127.0.0.1:0\n    reuse_port: false\n",
                               routes=direct_routes()))
        one.wait_log(r"listener public on 127\.0\.0\.1:0 \(port \d+\)$")
        self.assertEqual(listening_sockets(one.port, one.proc.pid), 1)
        one.stop()
        # The default (`reuse_port: auto`) for plain HTTP.
        sg = Stealgate(config(routes=direct_routes()))
        sg.wait_log(r"listener public on 127\.0\.0\.1:0 \(port \d+\), 2 sockets \(reuse_port\)")
        self.assertEqual(listening_sockets(sg.port, sg.proc.pid), 2)
        # New connections from 100 source ports: the kernel's hash gives each socket some
        # (all on one: 1 in 2^99), and the loop of each stays on its own worker.
        for _ in range(100):
            self.assertEqual(request_once(sg.port, "GET", "/")[0], 200)
        loops = self.listener_tasks(sg)
        self.assertEqual([t["name"] for t in loops], ["127.0.0.1:0 #1", "127.0.0.1:0 #2"])
        self.assertEqual([t["last_worker"] for t in loops], [0, 1])
        for t in loops:
            self.assertGreaterEqual(t["wakes"]["io"], 1, t)
        self.assertEqual(sg.metric("stealgate_downstream_connections_total", listener="public"), 100)
        # `reuse_port: true` by reload makes the same sockets: nothing to say.
        explicit = "  - name: public\n    address: 127.0.0.1:0\n    reuse_port: true\n"
        self.assertTrue(sg.reload(config(listeners=explicit, routes=direct_routes())))
        # Turning it off by reload keeps the sockets, and says so.
        off = "  - name: public\n    address: 127.0.0.1:0\n    reuse_port: false\n"
        self.assertTrue(sg.reload(config(listeners=off, routes=direct_routes())))
        sg.wait_log(r"listener public: backlog and reuse_port are settings of its sockets, which a reload keeps")
        self.assertEqual(sum("reuse_port are settings" in line for line in sg.logs()), 1, "warned at the first reload")
        self.assertEqual(listening_sockets(sg.port, sg.proc.pid), 2)
        self.assertEqual(request_once(sg.port, "GET", "/")[0], 200)
        # A reload that drops the listener closes both sockets.
        port = sg.port
        other = "  - name: other\n    address: 127.0.0.1:0\n"
        self.assertTrue(sg.reload(config(listeners=other, routes=direct_routes())))
        sg.wait_for(lambda: listening_sockets(port, sg.proc.pid) == 0, 5 * TIMEOUT_SCALE, "a socket still listens")
        sg.stop()

    def test_every_worker_accepts_from_a_tls_listeners_one_socket(self):
        # On io_uring: a copy of the socket's descriptor per worker, each with an accept loop
        # pinned to its worker, taking one connection per wait (a connection goes to a
        # worker waiting for one). On epoll, one loop.
        sg = Stealgate(config(listeners=tls_public_listener(), routes=direct_routes()))
        uring = sg.io_driver() == "io_uring"
        sg.wait_log(r"listener public on 127\.0\.0\.1:0 \(port \d+\)" + (", accepting on 2 workers" if uring else "") +
                    ", TLS$")
        self.assertEqual(listening_sockets(sg.port, sg.proc.pid), 1)
        for _ in range(20):
            self.assertEqual(request_once(sg.port, "GET", "/", tls=tls_client_context())[0], 200)
        loops = self.listener_tasks(sg)
        if uring:
            self.assertEqual([t["name"] for t in loops], ["127.0.0.1:0 #1", "127.0.0.1:0 #2"])
            self.assertEqual([t["last_worker"] for t in loops], [0, 1])
            for t in loops:  # each took connections (the kernel wakes the accept armed first)
                self.assertGreaterEqual(t["wakes"]["io"], 1, t)
        else:
            self.assertEqual([t["name"] for t in loops], ["127.0.0.1:0"])
        self.assertEqual(sg.metric("stealgate_downstream_connections_total", listener="public"), 20)
        # A reload that turns TLS off keeps the sockets and their loops, and says so.
        self.assertTrue(sg.reload(config(listeners="  - name: public\n    address: 127.0.0.1:0\n",
                                         routes=direct_routes())))
        sg.wait_log(r"listener public: backlog and reuse_port are settings of its sockets, which a reload keeps, "
                    r"and so is whether every worker accepts")
        for _ in range(4):
            with socket.create_connection(("127.0.0.1", sg.port), timeout=10) as c:
                c.sendall(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
                self.assertTrue(c.recv(4096).startswith(b"HTTP/1.1 200"))
        sg.stop()


def direct_routes():
    return "  - name: hello\n    match: { path: / }\n    direct_response: { status: 200, body: hi }\n"


class AddressInUseAtStartTest(unittest.TestCase):
    """At a restart the previous process may still hold the listening address for a moment
    (io_uring releases a killed process's sockets after the process is gone): a start
    tries again for up to 2 s before it gives up. A reload does not wait."""

    @staticmethod
    def blocker():
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        return s

    def cfg(self, port):
        return config(listeners=f"  - name: public\n    address: 127.0.0.1:{port}\n",
                      routes="  - name: all\n    match: { path_prefix: / }\n    direct_response: { status: 200, body: ok }\n")

    def test_a_start_waits_for_an_address_released_meanwhile(self):
        held = self.blocker()
        port = held.getsockname()[1]
        threading.Timer(0.5, held.close).start()
        started = time.monotonic()
        sg = Stealgate(self.cfg(port))
        try:
            self.assertGreaterEqual(time.monotonic() - started, 0.5)
            self.assertEqual(sg.port, port)
            self.assertEqual(request_once(port, "GET", "/")[0], 200)
            sg.wait_log(r"listener public on 127\.0\.0\.1:\d+: the address was in use for \d+ ms")
        finally:
            self.assertEqual(sg.stop(), 0)

    def test_a_start_gives_up_on_an_address_that_stays_in_use(self):
        held = self.blocker()
        port = held.getsockname()[1]
        started = time.monotonic()
        sg = Stealgate(self.cfg(port), wait_ready=False)
        try:
            self.assertNotEqual(sg.proc.wait(timeout=30), 0)
            self.assertGreaterEqual(time.monotonic() - started, 2.0)
            sg.wait_log(r"cannot listen on 127\.0\.0\.1:\d+: Address already in use \(still, after 2000 ms\)")
        finally:
            held.close()
            sg.stop(expect_rc=None)

    def test_a_second_process_cannot_join_a_listeners_socket_per_worker(self):
        # `reuse_port: auto` binds a socket per worker, yet only on a free address: a second
        # stealgate started on it by mistake fails instead of taking part of its connections.
        first = Stealgate(self.cfg(0))
        try:
            first.wait_log(r"listener public on 127\.0\.0\.1:\d+ \(port \d+\), 2 sockets \(reuse_port\)")
            second = Stealgate(self.cfg(first.port), wait_ready=False)
            try:
                self.assertNotEqual(second.proc.wait(timeout=30), 0)
                second.wait_log(r"cannot listen on 127\.0\.0\.1:\d+: Address already in use \(still, after 2000 ms\)")
            finally:
                second.stop(expect_rc=None)
            self.assertEqual(listening_sockets(first.port), 2)
            for _ in range(20):
                self.assertEqual(request_once(first.port, "GET", "/")[0], 200)
        finally:
            self.assertEqual(first.stop(), 0)

    def test_a_reload_adding_a_listener_on_an_address_in_use_fails_at_once(self):
        sg = Stealgate(self.cfg(0))
        held = self.blocker()
        try:
            port = held.getsockname()[1]
            extra = f"  - name: second\n    address: 127.0.0.1:{port}\n"
            cfg = config(listeners=f"  - name: public\n    address: 127.0.0.1:{sg.port}\n" + extra,
                         routes="  - name: all\n    match: { path_prefix: / }\n    direct_response: { status: 200, body: ok }\n")
            started = time.monotonic()
            self.assertFalse(sg.reload(cfg))
            self.assertLess(time.monotonic() - started, 1.5)
            self.assertEqual(request_once(sg.port, "GET", "/")[0], 200)
        finally:
            held.close()
            self.assertEqual(sg.stop(), 0)


class DrainTest(unittest.TestCase):
    def test_sigterm_drains_in_flight_requests_and_exits_zero(self):
        up = Upstream("d1")
        sg = Stealgate(config(clusters=f"  - name: app\n    endpoints: [{up.address}]\n", routes=app_routes(),
                              extra="drain_timeout: 30s\n"))
        idle = Client(sg.port)
        self.assertEqual(idle.request("GET", "/warm").status, 200)
        results = []

        def slow_request():
            try:
                c = Client(sg.port, timeout=10)
                r = c.request("GET", "/slow?ms=800")
                results.append((r.status, r.header("connection")))
            except Exception as e:  # noqa: BLE001
                results.append(("error", str(e)))

        threads = [threading.Thread(target=slow_request) for _ in range(5)]
        for t in threads:
            t.start()
        # All five must be in flight (at the upstream) when the signal comes.
        sg.wait_for(lambda: sum(e["target"].startswith("/slow") for e in up.log()) == 5, 5 * TIMEOUT_SCALE,
                    "slow requests not in flight")
        t0 = time.time()
        sg.proc.send_signal(signal.SIGTERM)
        self.assertTrue(idle.closed_by_peer(timeout=2), "idle keep-alive connection not closed on drain")
        for t in threads:
            t.join(10)
        code = sg.proc.wait(10)
        self.assertEqual(code, 0)
        self.assertEqual(results, [(200, "close")] * 5)
        self.assertLess(time.time() - t0, 5 * TIMEOUT_SCALE, "the drain waited for more than its in-flight requests")
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", sg.port), timeout=1)
        sg.stop()
        up.stop()

    def test_a_request_begun_on_a_keep_alive_connection_is_answered_at_a_drain(self):
        # Drain closes idle keep-alive connections; one whose next request has begun to
        # arrive is not idle: closing it would reset a request the client cannot know to retry.
        up = Upstream("d3")
        sg = Stealgate(config(clusters=f"  - name: app\n    endpoints: [{up.address}]\n", routes=app_routes()))
        try:
            begun, idle = Client(sg.port), Client(sg.port)
            for c in (begun, idle):
                self.assertEqual(c.request("GET", "/warm").status, 200)
            begun.send(b"GET /second HTTP/1.1\r\nHost: h\r\n")
            time.sleep(0.3 * TIMEOUT_SCALE)  # the half head is read
            sg.proc.send_signal(signal.SIGTERM)
            self.assertTrue(idle.closed_by_peer(timeout=2), "idle keep-alive connection not closed on drain")
            begun.send(b"\r\n")
            r = begun.read_response()
            self.assertEqual((r.status, r.header("connection")), (200, "close"))
            self.assertEqual(sg.proc.wait(10), 0)
        finally:
            sg.stop()
            up.stop()

    def test_drain_idle_grace_answers_a_last_request_on_an_idle_connection(self):
        # With drain_idle_grace an idle keep-alive connection stays open after SIGTERM, so a
        # client that sends on it as the drain begins gets an answer, not a close it cannot
        # tell from a lost request; one that stays idle is closed when the grace ends.
        up = Upstream("d4")
        grace = 2 * TIMEOUT_SCALE
        sg = Stealgate(config(clusters=f"  - name: app\n    endpoints: [{up.address}]\n", routes=app_routes(),
                              extra=f"drain_timeout: 30s\ndrain_idle_grace: {int(grace * 1000)}ms\n"))
        try:
            later, idle = Client(sg.port), Client(sg.port)
            for c in (later, idle):
                self.assertEqual(c.request("GET", "/warm").status, 200)
            t0 = time.monotonic()
            sg.proc.send_signal(signal.SIGTERM)
            sg.wait_log(r"received SIGTERM, draining .*idle keep-alive connections take one more request", 5)
            with self.assertRaises(OSError):  # the listener stopped at once
                socket.create_connection(("127.0.0.1", sg.port), timeout=1)
            r = later.request("GET", "/last")
            self.assertEqual((r.status, r.header("connection")), (200, "close"))
            self.assertTrue(later.closed_by_peer(timeout=2), "the last request's connection stayed open")
            self.assertTrue(idle.closed_by_peer(timeout=grace + 2), "idle connection not closed after its grace")
            self.assertGreaterEqual(time.monotonic() - t0, grace * 0.95, "idle connection closed within its grace")
            self.assertEqual(sg.proc.wait(10), 0)
            self.assertLess(time.monotonic() - t0, grace + 3 * TIMEOUT_SCALE, "the drain outlasted the grace")
            self.assertIn("/last", [e["target"] for e in up.log()])
        finally:
            sg.stop()
            up.stop()

    def test_second_signal_forces_exit(self):
        up = Upstream("d2")
        sg = Stealgate(config(clusters=f"  - name: app\n    endpoints: [{up.address}]\n", routes=app_routes(),
                              extra="drain_timeout: 60s\n"))
        c = Client(sg.port, timeout=10)
        c.send(b"GET /slow?ms=20000 HTTP/1.1\r\nHost: h\r\n\r\n")
        # The request must be in flight (at the upstream) before the signals, or there is
        # nothing to force.
        sg.wait_for(lambda: any(e["target"].startswith("/slow") for e in up.log()), 5, "slow request not in flight")
        t0 = time.time()
        sg.proc.send_signal(signal.SIGTERM)
        sg.wait_log("draining", 5)
        sg.proc.send_signal(signal.SIGTERM)
        self.assertEqual(sg.proc.wait(10), 0)
        self.assertLess(time.time() - t0, 5 * TIMEOUT_SCALE, "the second signal must not wait out drain_timeout (60 s)")
        self.assertEqual(c.read_to_close(), b"", "the in-flight request cannot have been answered")
        c.close()
        sg.stop()
        up.stop()


class SignalsDuringStartTest(unittest.TestCase):
    """The config path is a FIFO, so the process waits in its first read of the
    configuration, the start's first step, for as long as the test needs."""

    TEXT = config(routes="  - match: { path_prefix: / }\n    direct_response: { status: 200 }\n")

    def start_blocked(self):
        sg = Stealgate(self.TEXT, wait_ready=False, config_fifo=True)
        def waits_for_a_writer():
            with open(f"/proc/{sg.proc.pid}/wchan") as f:
                return f.read() == "wait_for_partner"  # the kernel's FIFO open

        sg.wait_for(waits_for_a_writer, 10, "never opened the config FIFO")
        return sg

    def feed_config(self, sg):
        """Writes the configuration once; the write waits until the process opens the FIFO."""
        writer = threading.Thread(target=sg.write_config, args=(self.TEXT,), daemon=True)
        writer.start()
        return writer

    def test_a_reload_or_log_reopening_asked_for_while_it_starts_is_done_once_it_serves(self):
        sg = self.start_blocked()
        sg.proc.send_signal(signal.SIGHUP)
        sg.proc.send_signal(signal.SIGUSR1)
        time.sleep(0.2)
        self.assertIsNone(sg.proc.poll(), "a SIGHUP or SIGUSR1 during the start ended the process")
        self.feed_config(sg)
        sg.wait_ready()
        # The file may have changed after the start read it: the SIGHUP reads it again.
        reload_read = self.feed_config(sg)
        reload_read.join(10)
        self.assertFalse(reload_read.is_alive(), "the SIGHUP that arrived during the start never reloaded")
        sg.wait_log("configuration reloaded")
        sg.wait_log("log files reopened")
        self.assertEqual(request_once(sg.port, "GET", "/")[0], 200)
        self.assertEqual(sg.stop(), 0)

    def test_a_sigterm_while_it_starts_stops_it_cleanly(self):
        sg = self.start_blocked()
        sg.proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        self.feed_config(sg)
        self.assertEqual(sg.proc.wait(10 * TIMEOUT_SCALE), 0)
        sg.wait_log("received SIGTERM, draining")
        sg.stop()


class NotifyTest(unittest.TestCase):
    def test_sd_notify_messages(self):
        d = temp_dir()
        path = os.path.join(d, "notify.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.bind(path)
        s.settimeout(10)
        sg = Stealgate(config(routes="  - match: { path_prefix: / }\n    direct_response: { status: 200 }\n"),
                       env={"NOTIFY_SOCKET": path})
        first = s.recv(4096).decode()
        self.assertIn("READY=1", first)
        self.assertIn("STATUS=", first)
        sg.proc.send_signal(signal.SIGHUP)
        reloading = s.recv(4096).decode()
        self.assertIn("RELOADING=1", reloading)
        self.assertRegex(reloading, r"MONOTONIC_USEC=\d+")
        self.assertIn("READY=1", s.recv(4096).decode())
        sg.proc.send_signal(signal.SIGTERM)
        self.assertIn("STOPPING=1", s.recv(4096).decode())
        self.assertEqual(sg.proc.wait(10), 0)
        sg.stop()


class AccessLogTest(unittest.TestCase):
    @staticmethod
    def last_entry(log, target):
        deadline = time.time() + 5
        while time.time() < deadline:
            with open(log) as f:
                entries = [json.loads(line) for line in f if line.strip()]
            found = [e for e in entries if e["target"] == target]
            if found:
                return found[-1]
            time.sleep(0.05)
        raise AssertionError(f"no access log entry for {target}")

    def test_json_access_log_to_file_reopened_on_sigusr1(self):
        d = temp_dir()
        log = os.path.join(d, "access.log")
        dead = RefusingAddress()
        self.addCleanup(dead.close)
        sg = Stealgate(config(
            routes="  - name: dead\n    match: { path: /dead }\n    cluster: dead\n"
                   "  - name: hello\n    match: { path_prefix: /, methods: [GET] }\n"
                   "    direct_response: { status: 201, body: hi }\n",
            clusters=f"  - name: dead\n    endpoints: [{dead.address}]\n",
            logging=f"format: json\n  access_log: {{ enabled: true, path: {log}, format: json }}"))
        request_once(sg.port, "GET", "/first?q=1", headers=[("X-Request-Id", "req-1")])
        deadline = time.time() + 5
        while time.time() < deadline and not (os.path.exists(log) and os.path.getsize(log) > 0):
            time.sleep(0.05)
        with open(log) as f:
            entry = json.loads(f.readline())
        self.assertEqual(entry["method"], "GET")
        self.assertEqual(entry["target"], "/first?q=1")
        self.assertEqual(entry["route"], "hello")
        self.assertEqual(entry["status"], 201)
        self.assertEqual(entry["request_id"], "req-1")
        self.assertEqual(entry["bytes_out"], 2)
        for key in ("time", "client", "cluster", "endpoint", "duration_ms"):
            self.assertIn(key, entry)
        # A reply stealgate makes up counts the body it sent (the default "<status> <reason>").
        for method, path, status, body in (("GET", "/dead", 502, b"502 Bad Gateway\n"),
                                           ("POST", "/nowhere", 404, b"404 Not Found\n")):
            got_status, _, got_body = request_once(sg.port, method, path)
            self.assertEqual((got_status, got_body), (status, body))
            self.assertEqual(self.last_entry(log, path)["bytes_out"], len(body), path)
        # logrotate: move the file away, SIGUSR1, the next line goes to a new file.
        os.rename(log, log + ".1")
        sg.proc.send_signal(signal.SIGUSR1)
        sg.wait_log("log files reopened")
        request_once(sg.port, "GET", "/second")
        deadline = time.time() + 5
        while time.time() < deadline and not (os.path.exists(log) and os.path.getsize(log) > 0):
            time.sleep(0.05)
        with open(log) as f:
            self.assertEqual(json.loads(f.readline())["target"], "/second")
        # A note that quotes a client's bytes is still UTF-8 (a log shipper drops a line
        # that is not, and the attempt's trace with it).
        c = Client(sg.port)
        c.send(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gz\xffip, chunked\r\n\r\n0\r\n\r\n")
        self.assertEqual(c.read_response().status, 501)
        c.close()
        refused = []
        deadline = time.time() + 5
        while time.time() < deadline and not refused:
            with open(log, "rb") as f:
                refused = [json.loads(l.decode("utf-8")) for l in f if b'"status":501' in l]
            time.sleep(0.05)
        self.assertEqual([e["note"] for e in refused], ["transfer coding not implemented: gz\ufffdip, chunked"])
        # The event log is JSON too.
        events = [l for l in sg.logs() if l.startswith("{")]
        self.assertTrue(events)
        self.assertIn("level", json.loads(events[0]))
        self.assertEqual(sg.stop(), 0)

    def test_text_access_log_fields_cannot_be_forged(self):
        sg = Stealgate(config(routes="  - match: { path_prefix: / }\n    direct_response: { status: 200 }\n"))
        c = Client(sg.port)
        c.send(b'GET /a"b\\ HTTP/1.1\r\nHost: h\r\n\r\n')
        self.assertEqual(c.read_response().status, 200)
        c.send(b'POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: x" route="admin \xff, chunked\r\n\r\n')
        self.assertEqual(c.read_response().status, 501)
        c.close()
        sg.wait_log(r'"GET /a\\"b\\\\ HTTP/1\.1" 200 ')
        sg.wait_log(r'note="transfer coding not implemented: x\\" route=\\"admin \\xFF, chunked"$')
        self.assertEqual(sg.stop(), 0)


class SystemdUnitTest(unittest.TestCase):
    def test_unit_passes_systemd_analyze_verify(self):
        tool = shutil.which("systemd-analyze")
        if tool is None:
            self.skipTest("systemd-analyze not installed")
        with open(os.path.join(ROOT, "deploy", "stealgate.service")) as f:
            unit = f.read()
        for key in ("Type=notify", "ExecReload=", "--check-config", "DynamicUser=yes", "ProtectSystem=strict",
                    "NoNewPrivileges=yes", "CAP_NET_BIND_SERVICE", "LimitNOFILE=",
                    "Sockets=stealgate.socket stealgate-admin.socket"):
            self.assertIn(key, unit)
        d = temp_dir()
        unit = unit.replace("/usr/bin/stealgate", os.path.abspath(BIN))
        paths = [os.path.join(d, "stealgate.service")]
        with open(paths[0], "w") as f:
            f.write(unit)
        for name in ("stealgate.socket", "stealgate-admin.socket"):
            shutil.copy(os.path.join(ROOT, "deploy", name), d)
            paths.append(os.path.join(d, name))
        r = subprocess.run([tool, "verify"] + paths, capture_output=True, text=True, timeout=60)
        problems = [l for l in (r.stdout + r.stderr).splitlines()
                    if "stealgate" in l and "Documentation" not in l]
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(problems, [])

    def test_socket_units_match_the_default_config(self):
        # The shipped sockets and the shipped config must agree, or the service would
        # refuse to start (the socket named "public" on another address is an error).
        with open(os.path.join(ROOT, "config", "stealgate.yaml")) as f:
            cfg = f.read()
        for name, fd_name in (("stealgate.socket", "public"), ("stealgate-admin.socket", "admin")):
            with open(os.path.join(ROOT, "deploy", name)) as f:
                unit = f.read()
            listen = re.search(r"^ListenStream=(\S+)$", unit, re.M).group(1)
            self.assertIn(f"FileDescriptorName={fd_name}\n", unit)
            if fd_name == "admin":
                self.assertRegex(cfg, rf"(?m)^admin:\n  address: {re.escape(listen)}\b")
            else:
                self.assertRegex(cfg, rf"(?m)^  - name: {fd_name}\n    address: {re.escape(listen)}\b")


if __name__ == "__main__":
    main()
