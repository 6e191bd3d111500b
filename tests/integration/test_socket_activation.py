"""Socket activation: listening sockets handed over by the LISTEN_FDS protocol (what
systemd's stealgate.socket does; here the test process plays systemd: it binds, passes the
descriptors and restarts the daemon). Listeners adopt the socket on their address; a
restart refuses no connection and cuts no request; a socket unit that disagrees with the
config, a descriptor that is not a listening TCP socket, and unclaimed sockets are handled
as documented."""
import os
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import TIMEOUT_SCALE, Client, Stealgate, Upstream, config, listening_sockets, main, request_once  # noqa: E402


def listening_socket():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    return s


def reuse_port_socket(port=0):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", port))
    s.listen(128)
    return s


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def port_of(s):
    return s.getsockname()[1]


def gateway_config(public_port, admin_port=0, up=None, listeners_extra=""):
    routes = "  - name: hello\n    match: { path: / }\n    direct_response: { status: 200, body: hi }\n"
    clusters = ""
    if up is not None:
        clusters = f"  - name: app\n    endpoints: [{up.address}]\n"
        routes += "  - name: app\n    match: { path_prefix: /slow }\n    cluster: app\n    timeout: 10s\n"
    return config(listeners=f"  - name: public\n    address: 127.0.0.1:{public_port}\n" + listeners_extra,
                  admin=f"127.0.0.1:{admin_port}", clusters=clusters, routes=routes,
                  logging="access_log: { enabled: false }")


class SocketActivationTest(unittest.TestCase):
    def setUp(self):
        self.socks = []

    def tearDown(self):
        for s in self.socks:
            s.close()

    def sock(self):
        s = listening_socket()
        self.socks.append(s)
        return s

    def test_listeners_and_admin_adopt_the_sockets_on_their_addresses(self):
        public, admin = self.sock(), self.sock()
        # The test keeps its own copies listening: had stealgate bound these addresses
        # itself (no reuse_port), its bind would have failed with EADDRINUSE.
        sg = Stealgate(gateway_config(port_of(public), port_of(admin)), inherit=[("public", public), ("admin", admin)])
        self.assertEqual(sg.ports["public"], port_of(public))
        self.assertEqual(sg.admin_port, port_of(admin))
        sg.wait_log(r"listener public on 127\.0\.0\.1:\d+ \(port \d+\) on an inherited socket$")
        # One socket without SO_REUSEPORT: `reuse_port: auto` serves on it as it is, quietly.
        self.assertFalse([line for line in sg.logs() if "reuse_port:" in line])
        sg.wait_log(r"admin endpoint on .*\(inherited socket\)")
        sg.wait_log(r"2 inherited listening socket\(s\)")
        self.assertEqual(request_once(port_of(public), "GET", "/")[0], 200)
        self.assertEqual(sg.admin_get("/ready")[0], 200)
        sg.stop()

    def test_restart_on_inherited_sockets_refuses_no_connection_and_cuts_no_request(self):
        up = Upstream("act")
        self.addCleanup(up.stop)
        public, admin = self.sock(), self.sock()
        cfg = gateway_config(port_of(public), port_of(admin), up=up, listeners_extra="")
        inherit = [("public", public), ("admin", admin)]
        sg = Stealgate(cfg + "drain_timeout: 30s\n", inherit=inherit)
        counts = {"ok": 0, "refused": 0, "other": 0}
        stop = threading.Event()
        lock = threading.Lock()

        def load():  # a new connection per request, the case a restart usually breaks
            while not stop.is_set():
                try:
                    status, _, _ = request_once(port_of(public), "GET", "/", timeout=10 * TIMEOUT_SCALE)
                    key = "ok" if status == 200 else "other"
                except ConnectionRefusedError:
                    key = "refused"
                except OSError:
                    key = "other"
                with lock:
                    counts[key] += 1

        threads = [threading.Thread(target=load, daemon=True) for _ in range(3)]
        for t in threads:
            t.start()
        sg.wait_for(lambda: counts["ok"] >= 50, 5 * TIMEOUT_SCALE, "the load did not start")
        slow = Client(port_of(public), timeout=10 * TIMEOUT_SCALE)
        slow.send(b"GET /slow?ms=800&id=inflight HTTP/1.1\r\nHost: h\r\n\r\n")
        sg.wait_for(lambda: any(e["target"].endswith("id=inflight") for e in up.log()), 5, "slow request not in flight")
        # systemctl restart: the old process drains and exits, the new one takes the same
        # sockets; connections made meanwhile wait in the kernel's backlog.
        sg.stop()
        sg2 = Stealgate(cfg, inherit=inherit)
        served = counts["ok"]
        sg2.wait_for(lambda: counts["ok"] >= served + 50, 5 * TIMEOUT_SCALE, "the new process serves nothing")
        stop.set()
        for t in threads:
            t.join(15 * TIMEOUT_SCALE)
        r = slow.read_response()
        slow.close()
        self.assertEqual(r.status, 200, "the request in flight on the old process was cut")
        print(f"restart under load: {counts}", file=sys.stderr)
        self.assertEqual(counts["refused"], 0, counts)
        self.assertEqual(counts["other"], 0, counts)
        sg2.stop()

    def test_inherited_socket_named_for_a_listener_on_another_address_is_an_error(self):
        public = self.sock()
        elsewhere = free_port()
        sg = Stealgate(gateway_config(elsewhere), inherit=[("public", public)], wait_ready=False)
        self.assertEqual(sg.proc.wait(10 * TIMEOUT_SCALE), 1)
        out = "\n".join(sg.logs())
        self.assertIn(f'the inherited socket named "public" listens on 127.0.0.1:{port_of(public)}, '
                      f"not on 127.0.0.1:{elsewhere}", out)
        sg.stop(expect_rc=1)

    def test_descriptor_that_is_not_a_listening_socket_is_refused(self):
        not_listening = socket.socket()
        not_listening.bind(("127.0.0.1", 0))
        self.socks.append(not_listening)
        sg = Stealgate(gateway_config(0), inherit=[("public", not_listening)], wait_ready=False)
        self.assertEqual(sg.proc.wait(10 * TIMEOUT_SCALE), 1)
        self.assertIn('inherited descriptor 3 ("public"): not listening', "\n".join(sg.logs()))
        sg.stop(expect_rc=1)

    def test_unclaimed_socket_is_closed_and_a_removed_listener_closes_its_socket(self):
        public, extra, second = self.sock(), self.sock(), self.sock()
        two = f"  - name: second\n    address: 127.0.0.1:{port_of(second)}\n"
        sg = Stealgate(gateway_config(port_of(public), listeners_extra=two),
                       inherit=[("public", public), ("extra", extra), ("second", second)])
        sg.wait_log(rf'inherited socket "extra" on 127\.0\.0\.1:{port_of(extra)} matches no listener: closed')
        self.assertEqual(sg.ports["second"], port_of(second))
        # With the test's own copies closed too, nothing listens there any more.
        extra_port = port_of(extra)
        extra.close()
        with self.assertRaises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", extra_port), timeout=2)
        # A reload that drops the listener closes the socket it adopted.
        second_port = port_of(second)
        second.close()
        self.assertEqual(request_once(second_port, "GET", "/")[0], 200)
        self.assertTrue(sg.reload(gateway_config(port_of(public))))
        sg.wait_for(lambda: _refused(second_port), 5 * TIMEOUT_SCALE, "the removed listener still accepts")
        self.assertEqual(request_once(port_of(public), "GET", "/")[0], 200)
        sg.stop()

    def test_reuse_port_listener_adopts_every_inherited_socket_on_its_address(self):
        first = reuse_port_socket()
        second = reuse_port_socket(port_of(first))
        self.socks += [first, second]
        port = port_of(first)
        sg = Stealgate(gateway_config(port, listeners_extra="    reuse_port: true\n"),
                       inherit=[("public", first), ("public", second)])
        sg.wait_log(r"listener public on \S+ \(port \d+\) on an inherited socket, 2 sockets \(reuse_port\)")
        # Both adopted, none bound beside them (that would make three).
        self.assertEqual(listening_sockets(port), 2)
        self.assertEqual(listening_sockets(port, sg.proc.pid), 2)
        for _ in range(20):
            self.assertEqual(request_once(port, "GET", "/")[0], 200)
        sg.stop()

    def test_reuse_port_beside_an_inherited_socket_without_it_keeps_that_one_socket(self):
        public = self.sock()  # no SO_REUSEPORT: nothing can bind beside it
        sg = Stealgate(gateway_config(port_of(public), listeners_extra="    reuse_port: true\n"),
                       inherit=[("public", public)])
        sg.wait_log(r"listener public on \S+: reuse_port: 1 of 2 sockets \(one per worker\): cannot bind another "
                    r"socket beside it: Address already in use \(.*ReusePort=yes\)")
        self.assertEqual(listening_sockets(port_of(public)), 1)
        self.assertEqual(request_once(port_of(public), "GET", "/")[0], 200)
        sg.stop()


def _refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return False
    except ConnectionRefusedError:
        return True


if __name__ == "__main__":
    main()
