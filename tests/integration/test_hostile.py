"""Hostile input through the real binary: access rules that hold against every spelling of
the path or host they guard (origin-form and absolute-form), path policies, upgrades that
are allowed (and h2c that is not), HTAB as OWS in framing fields, the default limits, and
connect failures that cost nothing by default."""
import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Client, RefusingAddress, Stealgate, Upstream, config, main  # noqa: E402

DENY_ROUTES = """  - name: deny-internal
    match: { path_prefix: /internal }
    direct_response: { status: 403, body: "denied" }
  - name: deny-admin-host
    match: { host: admin.example.com }
    direct_response: { status: 403, body: "denied host" }
  - name: deny-legacy-admin
    match: { path_prefix: /Legacy/Admin, case_sensitive: false }
    direct_response: { status: 403, body: "denied" }
  - name: deny-config
    match: { path: /config }
    direct_response: { status: 403, body: "denied" }
  - name: app
    match: { path_prefix: / }
    cluster: app
"""

# Spellings of /internal/... that common upstream frameworks resolve to /internal/...:
# each must be refused (403 by the deny route, or 400) and never reach the upstream.
PATH_SPELLINGS = [
    "/internal", "/internal/", "/internal/secret", "//internal/secret", "///internal", "/internal//secret",
    "/./internal/secret", "/././internal", "/a/../internal/secret", "/a/b/../../internal", "/public/../internal",
    "/%69nternal/secret", "/%69%6E%74%65%72%6E%61%6C", "/%69%6e%74%65%72%6e%61%6c/secret", "/inter%6eal",
    "/%2e/internal", "/%2E/internal", "/public/%2e%2e/internal", "/public/%2E%2E/internal", "/public/.%2e/internal",
    "/public/%2e./internal", "/public/%2e%2e//internal", "//public//..//internal", "/public/x/../../internal",
    "/internal/./secret", "/internal/%2e/secret", "/internal%2fsecret", "/internal%2Fsecret", "/internal/secret/..",
    "/%2e%2e/internal", "/../internal", "/public/../../internal",
    "/public/..;/internal", "/public/..;x=1/internal", "/.;/internal", "/public/%2e%2e;/internal",  # servlet containers
]


def raw(port, request, read_timeout=5, ip="127.0.0.1"):
    """Sends one raw request on a new connection, returns (status, response bytes)."""
    c = Client(port, timeout=read_timeout, ip=ip)
    try:
        c.send(request)
        r = c.read_response()
        return r.status, r
    finally:
        c.close()


def get(port, target, host="test.local", extra=""):
    return raw(port, f"GET {target} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n")


class AppCase(unittest.TestCase):
    """One stealgate (ROUTES, LISTENERS) in front of one upstream "app" per class; the
    upstream's log is cleared before each test."""
    ROUTES = DENY_ROUTES
    LISTENERS = None
    EXTRA = ""

    @classmethod
    def setUpClass(cls):
        cls.up = Upstream("app")
        cls.sg = Stealgate(config(listeners=cls.LISTENERS, routes=cls.ROUTES, extra=cls.EXTRA,
                                  clusters=f"  - name: app\n    endpoints: [{cls.up.address}]\n"))

    @classmethod
    def tearDownClass(cls):
        cls.sg.stop()
        cls.up.stop()

    def setUp(self):
        self.up.clear_log()


class DenyRouteSpellingsTest(AppCase):
    def assert_upstream_saw_nothing(self, what):
        seen = [e["target"] for e in self.up.log()]
        self.assertEqual(seen, [], f"{what} reached the upstream")

    def test_origin_form_spellings_never_reach_the_upstream(self):
        for target in PATH_SPELLINGS:
            status, _ = get(self.sg.port, target)
            self.assertIn(status, (400, 403), target)
        self.assert_upstream_saw_nothing("a spelling of /internal")

    def test_absolute_form_spellings_never_reach_the_upstream(self):
        for target in PATH_SPELLINGS:
            for prefix in ("http://test.local", "HTTP://Test.Local:80", "http://other.example"):
                status, _ = get(self.sg.port, prefix + target, host="ignored.example")
                self.assertIn(status, (400, 403), prefix + target)
        self.assert_upstream_saw_nothing("an absolute-form spelling of /internal")

    def test_host_spellings_never_reach_the_upstream(self):
        for host in ("admin.example.com", "ADMIN.example.COM", "admin.example.com.", "admin.example.com.:80",
                     "Admin.Example.Com..", "admin.example.com:8080"):
            status, _ = get(self.sg.port, "/app", host=host)
            self.assertEqual(status, 403, host)
        for authority in ("http://admin.example.com.", "http://ADMIN.EXAMPLE.COM:80", "http://admin.example.com./x"):
            target = authority if authority.count("/") > 2 else authority + "/app"
            status, _ = get(self.sg.port, target, host="test.local")
            self.assertEqual(status, 403, authority)
        status, _ = get(self.sg.port, "/app", host="%61dmin.example.com")
        self.assertEqual(status, 400)
        self.assert_upstream_saw_nothing("a spelling of the denied host")

    def test_a_case_insensitive_rule_holds_against_every_case_and_spelling(self):
        # For upstreams that fold case (IIS, ASP.NET): the rule sees the normalized path.
        for target in ("/Legacy/Admin", "/legacy/admin", "/LEGACY/ADMIN/users", "/lEgAcY/aDmIn",
                       "/%4Cegacy/Admin", "/%6c%45GACY/admin", "/x/../LEGACY//admin", "/./legacy/./ADMIN/",
                       "/LEGACY/%41DMIN", "/legacy/admin%2fx"):
            status, _ = get(self.sg.port, target)
            self.assertIn(status, (400, 403), target)
        self.assert_upstream_saw_nothing("a spelling of /legacy/admin")
        # Paths are case-sensitive unless the route says otherwise (RFC 3986 §6.2.2.1).
        self.assertEqual(get(self.sg.port, "/INTERNAL/x")[0], 200)
        self.assertEqual([e["target"] for e in self.up.log()], ["/INTERNAL/x"])

    def test_a_fragment_never_reaches_the_upstream(self):
        # Frameworks that cut a fragment off (gunicorn, Node) would serve /config for these,
        # which an exact-path rule would otherwise see as other paths.
        for target in ("/config#", "/config#x", "/config#/../x", "/config?q#x", "/x#/../config",
                       "http://test.local/config#x"):
            self.assertEqual(get(self.sg.port, target)[0], 400, target)
        self.assert_upstream_saw_nothing("a target with a fragment")
        # An encoded '#' is data: another path.
        self.assertEqual(get(self.sg.port, "/config%23x")[0], 200)
        self.assertEqual([e["target"] for e in self.up.log()], ["/config%23x"])

    def test_the_normalized_path_goes_upstream_with_the_query_untouched(self):
        status, _ = get(self.sg.port, "/api/../app//x/./%7Ey/%2e/z%3f?q=%2e%2e/../a//b")
        self.assertEqual(status, 200)
        self.assertEqual([e["target"] for e in self.up.log()], ["/app/x/~y/z%3F?q=%2e%2e/../a//b"])

    def test_lookalikes_that_are_not_the_path_still_pass(self):
        # An encoded '%' is data, and an encoded slash is kept (never a separator) by default.
        for target, upstream_sees in (("/public/internal", "/public/internal"),
                                      ("/%252e%252e/internal", "/%252e%252e/internal"),
                                      ("/public/..%2finternal", "/public/..%2Finternal")):
            self.up.clear_log()
            self.assertEqual(get(self.sg.port, target)[0], 200, target)
            self.assertEqual([e["target"] for e in self.up.log()], [upstream_sees])

    def test_refusals_and_rewrites_are_counted(self):
        before_norm = self.sg.metric("stealgate_http_paths_normalized_total", listener="public")
        before_root = self.sg.metric("stealgate_http_paths_rejected_total", listener="public", reason="above_root")
        before_enc = self.sg.metric("stealgate_http_paths_rejected_total", listener="public",
                                    reason="malformed_encoding")
        self.assertEqual(get(self.sg.port, "/a//b")[0], 200)
        self.assertEqual(get(self.sg.port, "/../x")[0], 400)
        self.assertEqual(get(self.sg.port, "/a%zz")[0], 400)
        self.assertEqual(get(self.sg.port, "/a%00b")[0], 400)
        self.assertEqual(self.sg.metric("stealgate_http_paths_normalized_total", listener="public"), before_norm + 1)
        self.assertEqual(self.sg.metric("stealgate_http_paths_rejected_total", listener="public",
                                        reason="above_root"), before_root + 1)
        self.assertEqual(self.sg.metric("stealgate_http_paths_rejected_total", listener="public",
                                        reason="malformed_encoding"), before_enc + 1)
        self.assertGreaterEqual(self.sg.metric("stealgate_http_paths_rejected_total", listener="public",
                                               reason="nul"), 1)


class PathPolicyTest(AppCase):
    """One listener per policy, each in front of the same deny route and upstream."""
    LISTENERS = "".join(
        f"  - name: {name}\n    address: 127.0.0.1:0\n{opts}" for name, opts in (
            ("strict", "    path_normalization: reject\n"),
            ("slash-reject", "    escaped_slashes: reject\n    backslashes: reject\n"),
            ("slash-decode", "    escaped_slashes: decode\n    backslashes: decode\n"),
            ("off", "    path_normalization: off\n"),
            ("params-reject", "    path_parameters: reject\n"),
        ))

    def status(self, listener, target):
        return get(self.sg.ports[listener], target)[0]

    def test_reject_answers_400_to_any_path_that_is_not_normal(self):
        for target in ("/a//b", "/a/./b", "/a/../b", "/%61", "/a%3fb", "/internal/../app"):
            self.assertEqual(self.status("strict", target), 400, target)
        self.assertEqual(self.status("strict", "/a/b%3F"), 200)
        self.assertEqual(self.status("strict", "/internal/x"), 403)
        self.assertEqual([e["target"] for e in self.up.log()], ["/a/b%3F"])

    def test_escaped_slashes_and_backslashes_rejected(self):
        for target in ("/a%2fb", "/a%2Fb", "/a%5cb", "/public/..%2finternal", "/a\\b"):
            self.assertEqual(self.status("slash-reject", target), 400, target)
        self.assertEqual(self.up.log(), [])

    def test_escaped_slashes_and_backslashes_decoded_as_separators(self):
        for target in ("/public%2f..%2finternal", "/public%2F%2E%2E%2Finternal/x", "/public\\..\\internal",
                       "/public%5c..%5cinternal"):
            self.assertEqual(self.status("slash-decode", target), 403, target)
        self.assertEqual(self.status("slash-decode", "/a%2Fb\\c"), 200)
        self.assertEqual([e["target"] for e in self.up.log()], ["/a/b/c"])

    def test_path_parameters_rejected_in_front_of_a_servlet_container(self):
        # Tomcat and Jetty read each of these as /config or /internal/...: refused, counted.
        before = self.sg.metric("stealgate_http_paths_rejected_total", listener="params-reject",
                                reason="path_parameters")
        targets = ("/config;x", "/config;jsessionid=1", "/internal;x/secret", "/in;x/config", "/a;/b")
        for target in targets:
            self.assertEqual(self.status("params-reject", target), 400, target)
        self.assertEqual(self.up.log(), [])
        self.assertEqual(self.sg.metric("stealgate_http_paths_rejected_total", listener="params-reject",
                                        reason="path_parameters"), before + len(targets))
        # An encoded ';' is data to them as well; by default (the other listeners) a ';' is
        # an ordinary character.
        self.assertEqual(self.status("params-reject", "/config%3Bx"), 200)
        self.assertEqual(self.status("slash-reject", "/config;x"), 200)
        self.assertEqual([e["target"] for e in self.up.log()], ["/config%3Bx", "/config;x"])

    def test_off_routes_on_the_path_as_received(self):
        # Documented as unsafe behind access rules: this is exactly the bypass it allows.
        self.assertEqual(self.status("off", "/a/../internal/x"), 200)
        self.assertEqual([e["target"] for e in self.up.log()], ["/a/../internal/x"])


class UpgradeTest(AppCase):
    ROUTES = """  - name: h2c-allowed
    match: { path_prefix: /h2c-ok }
    cluster: app
    rewrite: { path: /h2c }
    upgrades: [h2c]
  - name: no-upgrades
    match: { path_prefix: /none }
    cluster: app
    rewrite: { path: /ws }
    upgrades: []
  - name: app
    match: { path_prefix: / }
    cluster: app
"""

    H2C = ("Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
           "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n")

    def headers_seen(self):
        log = self.up.log()
        self.assertEqual(len(log), 1)
        return {k.lower(): v for k, v in log[0]["headers"]}

    def test_h2c_reaches_the_upstream_as_plain_http(self):
        before = self.sg.metric("stealgate_http_upgrades_refused_total", reason="not_allowed")
        c = Client(self.sg.port)
        c.send(f"GET /h2c HTTP/1.1\r\nHost: test.local\r\n{self.H2C}\r\n")
        r = c.read_response()
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, b"plain http/1.1")
        seen = self.headers_seen()
        for gone in ("upgrade", "http2-settings", "connection"):
            self.assertNotIn(gone, seen)
        # The connection is still HTTP/1.1 under stealgate's control: a second request works.
        self.assertEqual(c.request("GET", "/h2c").status, 200)
        c.close()
        self.assertEqual(self.sg.metric("stealgate_http_upgrades_refused_total", reason="not_allowed"), before + 1)

    def test_a_route_that_lists_h2c_forwards_it(self):
        c = Client(self.sg.port)
        c.send(f"GET /h2c-ok HTTP/1.1\r\nHost: test.local\r\n{self.H2C}\r\n")
        r = c.read_response()
        self.assertEqual(r.status, 101)
        self.assertEqual(r.header("upgrade"), "h2c")
        self.assertEqual(self.headers_seen().get("upgrade"), "h2c")
        c.close()

    def test_websocket_still_tunnels_and_only_allowed_protocols_are_offered(self):
        c = Client(self.sg.port)
        c.send(b"GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket, h2c\r\n\r\n")
        r = c.read_response()
        self.assertEqual(r.status, 101)
        self.assertEqual(r.header("upgrade"), "websocket")
        self.assertEqual(self.headers_seen().get("upgrade"), "websocket")
        c.send(b"ping")
        c.sock.settimeout(5)
        got = c.buf
        while b"echo:ping" not in got:
            got += c.sock.recv(100)
        c.close()

    def test_an_upgrade_the_upstream_declines_leaves_the_connection_http(self):
        c = Client(self.sg.port)
        c.send(b"GET /h2c HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
        self.assertEqual(c.read_response().status, 200)  # the upstream answered without switching
        self.assertEqual(c.request("GET", "/h2c").status, 200)
        c.close()

    def test_an_empty_allow_list_forwards_no_upgrade(self):
        status, r = raw(self.sg.port, "GET /none HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\n"
                                      "Upgrade: websocket\r\n\r\n")
        self.assertEqual(status, 400)  # the upstream's "not an upgrade": it never saw Upgrade
        self.assertNotIn("upgrade", self.headers_seen())

    def test_an_unasked_for_101_is_a_502(self):
        before = self.sg.metric("stealgate_http_upgrades_refused_total", reason="unexpected_101")
        self.assertEqual(get(self.sg.port, "/always-101")[0], 502)
        # Asked for websocket, switched to h2c: not what was offered.
        status, _ = raw(self.sg.port, "GET /always-101?to=h2c HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\n"
                                      "Upgrade: websocket\r\n\r\n")
        self.assertEqual(status, 502)
        # Asked for h2c on a route that does not allow it; the upstream switches anyway.
        status, _ = raw(self.sg.port, f"GET /always-101?to=h2c HTTP/1.1\r\nHost: h\r\n{self.H2C}\r\n")
        self.assertEqual(status, 502)
        self.assertEqual(self.sg.metric("stealgate_http_upgrades_refused_total", reason="unexpected_101"), before + 3)


class FramingOwsAndLimitsTest(AppCase):
    ROUTES = "  - name: app\n    match: { path_prefix: / }\n    cluster: app\n"

    def test_htab_around_framing_values_is_ows(self):
        for cl in ("Content-Length:\t5", "Content-Length: 5\t", "Content-Length:\t5\t", "Content-Length: \t5 \t"):
            status, _ = raw(self.sg.port, f"POST /echo HTTP/1.1\r\nHost: h\r\n{cl}\r\nConnection: close\r\n\r\nhello")
            self.assertEqual(status, 200, repr(cl))
        for te in ("Transfer-Encoding:\tchunked", "Transfer-Encoding: chunked\t", "Transfer-Encoding:\tchunked\t"):
            status, _ = raw(self.sg.port, f"POST /echo HTTP/1.1\r\nHost: h\r\n{te}\r\nConnection: close\r\n\r\n"
                                          "5\r\nhello\r\n0\r\n\r\n")
            self.assertEqual(status, 200, repr(te))
        self.assertEqual([e["body_len"] for e in self.up.log()], [5] * 7)
        for conn in ("Connection:\tclose\t", "Connection: keep-alive,\tclose"):
            c = Client(self.sg.port)
            c.send(f"GET / HTTP/1.1\r\nHost: h\r\n{conn}\r\n\r\n")
            self.assertEqual(c.read_response().header("connection"), "close", repr(conn))
            self.assertTrue(c.closed_by_peer())
            c.close()

    def test_an_http10_request_without_host_goes_upstream_with_the_address_it_came_to(self):
        # Found by fuzz_header_rules: it went upstream as HTTP/1.1 without Host, which an
        # upstream must refuse (RFC 9112 §3.2); an empty Host, which the RFC allows, nginx
        # answers with 400. The target URI's authority is then the connection's local
        # address (RFC 9112 §3.3).
        status, _ = raw(self.sg.port, "GET /v10 HTTP/1.0\r\n\r\n")
        self.assertEqual(status, 200)
        headers = self.up.log()[0]["headers"]
        self.assertEqual([v for k, v in headers if k.lower() == "host"], [f"127.0.0.1:{self.sg.port}"])

    def test_default_limits_take_what_nginx_and_haproxy_forward(self):
        usual = "User-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\nAccept: */*\r\nAccept-Language: en\r\n" \
                "Accept-Encoding: gzip\r\nCookie: session=abc\r\nReferer: http://test.local/\r\n"
        app = "".join(f"X-App-Field-{i}: value-{i}-{'v' * 40}\r\n" for i in range(110))
        status, _ = raw(self.sg.port, f"GET /many HTTP/1.1\r\nHost: h\r\n{usual}{app}Connection: close\r\n\r\n")
        self.assertEqual(status, 200)
        target = "/long?" + "q" * (8 * 1024 - len("/long?"))
        status, _ = get(self.sg.port, target)
        self.assertEqual(status, 200)
        self.assertEqual([len(e["target"]) for e in self.up.log()][-1], 8 * 1024)


class WildcardListenerTest(AppCase):
    LISTENERS = "  - name: public\n    address: 0.0.0.0:0\n"

    def test_an_http10_request_without_host_names_the_address_its_connection_came_to(self):
        # A listener on every address cannot name one: each connection's own local address
        # is the authority (RFC 9112 §3.3), whichever loopback address the client dialled.
        for ip in ("127.0.0.1", "127.0.0.2"):
            status, _ = raw(self.sg.port, "GET /v10 HTTP/1.0\r\n\r\n", ip=ip)
            self.assertEqual(status, 200, ip)
        hosts = [[v for k, v in e["headers"] if k.lower() == "host"] for e in self.up.log()]
        self.assertEqual(hosts, [[f"127.0.0.1:{self.sg.port}"], [f"127.0.0.2:{self.sg.port}"]])


class DeadEndpointTest(unittest.TestCase):
    def test_a_dead_endpoint_costs_nothing_without_retries_configured(self):
        dead, good = RefusingAddress(), Upstream("good")
        sg = Stealgate(config(
            clusters=f"  - name: app\n    endpoints: [{dead.address}, {good.address}]\n",
            routes="  - name: app\n    match: { path_prefix: / }\n    cluster: app\n"))
        try:
            c = Client(sg.port)
            statuses = [c.request("POST" if i % 2 else "GET", "/", body=b"x" if i % 2 else b"").status
                        for i in range(12)]
            self.assertEqual(statuses, [200] * 12, "a connect failure must go to the other endpoint")
            retries = sg.metric("stealgate_upstream_retries_total", cluster="app")
            self.assertGreaterEqual(retries, 4)
            self.assertEqual(retries, sg.metric("stealgate_upstream_connect_errors_total", cluster="app"))
            sg.wait_log(r"endpoint=127\.0\.0\.1:\d+ [\d.]+ms attempts=2")
            self.assertEqual(len(good.log()), 12)
        finally:
            sg.stop()
            good.stop()
            dead.close()

    def test_every_endpoint_dead_is_a_502_after_trying_each_once(self):
        dead = [RefusingAddress() for _ in range(3)]
        sg = Stealgate(config(
            clusters=f"  - name: app\n    endpoints: [{', '.join(d.address for d in dead)}]\n"
                     "    outlier_detection: { consecutive_failures: 0 }\n",
            routes="  - name: app\n    match: { path_prefix: / }\n    cluster: app\n"))
        try:
            status, _ = get(sg.port, "/")
            self.assertEqual(status, 502)
            self.assertEqual(sg.metric("stealgate_upstream_connect_errors_total", cluster="app"), 3)
            sg.wait_log(r"attempts=3")
        finally:
            sg.stop()
            for d in dead:
                d.close()


def buffering_route(name, extra=""):
    return (f"  - name: {name}\n    match: {{ path_prefix: /{name} }}\n    cluster: app\n"
            f"    max_concurrent_requests: 1\n{extra}")


class RequestBufferingTest(AppCase):
    """routes[].request_buffering: a slow client's body is read before admission, so it holds
    no permit and no upstream meanwhile (the slow-POST attack on thread-per-connection
    upstreams); /streamed is the same route without it."""
    ROUTES = (buffering_route("buffered", "    request_buffering: 64KiB\n")
              + buffering_route("small", "    request_buffering: 1KiB\n") + buffering_route("streamed"))
    LISTENERS = "  - name: public\n    address: 127.0.0.1:0\n    body_timeout: 1s\n"
    EXTRA = "limits:\n  queue_timeout: 50ms\n"

    def in_flight(self):
        return self.sg.metric("stealgate_upstream_requests_active", cluster="app")

    def post(self, path, body=b"x"):
        return raw(self.sg.port, f"POST {path} HTTP/1.1\r\nHost: h\r\nContent-Length: {len(body)}\r\n"
                                 f"Connection: close\r\n\r\n".encode() + body)[0]

    def test_a_slow_body_holds_no_permit_and_no_upstream(self):
        for path, buffered in (("/buffered", True), ("/streamed", False)):
            with self.subTest(path=path):
                slow = Client(self.sg.port)
                slow.send(f"POST {path} HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabcde".encode())
                time.sleep(0.3)
                # Buffering: nothing is in flight, and the route's one permit is free.
                self.assertEqual(self.in_flight(), 0 if buffered else 1)
                self.assertEqual(self.post(path), 200 if buffered else 503)
                slow.send(b"fghij")
                r = slow.read_response()
                self.assertEqual(r.status, 200)
                self.assertEqual(r.json()["body"], "abcdefghij")
                slow.close()

    def test_expect_100_continue_is_answered_before_any_upstream_is_asked(self):
        c = Client(self.sg.port)
        c.send(b"POST /buffered HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        interim = c.read_response()
        self.assertEqual(interim.status, 100)
        self.assertEqual(self.in_flight(), 0)
        c.send(b"hello")
        r = c.read_response()
        self.assertEqual(r.status, 200)
        info = r.json()
        self.assertEqual(info["body"], "hello")
        self.assertNotIn("expect", [k.lower() for k, _ in info["headers"]], "the 100 was ours to give")
        c.close()

    def test_a_body_longer_than_the_buffer_streams_on_whole(self):
        c = Client(self.sg.port)
        body = bytes(range(256)) * 80  # 20 KiB through a 1 KiB buffer
        c.send(f"POST /small HTTP/1.1\r\nHost: h\r\nContent-Length: {len(body)}\r\n\r\n".encode())
        for i in range(0, len(body), 4096):
            c.send(body[i:i + 4096])
            time.sleep(0.02)
        r = c.read_response()
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json()["body"].encode("latin-1"), body)
        c.close()

    def test_a_chunked_body_keeps_its_trailers(self):
        c = Client(self.sg.port)
        c.send(b"POST /buffered HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        time.sleep(0.1)
        c.send(b"2\r\nde\r\n0\r\nX-Checksum: 5\r\n\r\n")
        info = c.read_response().json()
        self.assertEqual(info["body"], "abcde")
        self.assertEqual(info["trailers"], {"x-checksum": "5"})
        c.close()

    def test_a_body_that_stops_or_stalls_never_reaches_the_upstream(self):
        c = Client(self.sg.port)
        c.send(b"POST /buffered HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc")
        self.assertEqual(c.read_response().status, 408, "body_timeout is 1s")
        c.close()
        gone = Client(self.sg.port)
        gone.send(b"POST /buffered HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc")
        time.sleep(0.1)
        gone.close()
        time.sleep(0.2)
        self.assertEqual(self.up.log(), [])
        self.assertEqual(self.post("/buffered", b"ok"), 200)


if __name__ == "__main__":
    main()
