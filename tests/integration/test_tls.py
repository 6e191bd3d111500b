"""TLS termination through the real binary, with certificates made by the openssl command
at test time and curl and Python's ssl module as clients: SNI, resumption, versions,
client certificates, bad certificate files, reloads that swap certificates, and the
handshake's metrics and failures. (The malformed-request and proxy suites also run over a
TLS listener: meson's *_tls tests, STEALGATE_TEST_TLS=1.)"""
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import certs as certs_mod  # noqa: E402
from harness import (TIMEOUT_SCALE, Client, Stealgate, Upstream, config, main,  # noqa: E402
                     tls_client_context)


def tls_listener(certificates, extra=""):
    lines = "".join(f"        - {{ cert: {c}, key: {k} }}\n" for c, k in certificates)
    return (f"  - name: public\n    address: 127.0.0.1:0\n    tls:\n      certificates:\n{lines}"
            + "".join(f"      {e}\n" for e in extra.splitlines() if e))


def app_config(up, listeners):
    return config(listeners=listeners,
                  clusters=f"  - name: app\n    endpoints: [{up.address}]\n",
                  routes="  - name: app\n    match: { path_prefix: / }\n    cluster: app\n")


def peer_cn(sock):
    subject = dict(x[0] for x in sock.getpeercert()["subject"])
    return subject["commonName"]


class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = certs_mod.Certs()
        cls.a = cls.c.leaf("a", "a.test", ["a.test"])
        cls.b = cls.c.leaf("b", "b.test", ["b.test", "*.wild.test"])
        cls.alice = cls.c.leaf("alice", "alice", client=True)
        cls.mallory = cls.c.leaf("mallory", "mallory", client=True, ca="other-ca")
        cls.up = Upstream("u")

    @classmethod
    def tearDownClass(cls):
        cls.up.stop()

    def start(self, extra="", certificates=None):
        sg = Stealgate(app_config(self.up, tls_listener(certificates or [self.a, self.b], extra)))
        self.addCleanup(sg.stop)
        return sg

    def connect(self, sg, name, ctx=None):
        ctx = ctx or tls_client_context(self.c.ca)
        return ctx.wrap_socket(socket.create_connection(("127.0.0.1", sg.port), timeout=10), server_hostname=name)

    def get(self, sg, name="a.test", ctx=None, headers=None):
        c = Client(sg.port, tls=ctx or tls_client_context(self.c.ca), server_hostname=name)
        try:
            return c.request("GET", "/echo", headers or [], host=name)
        finally:
            c.close()

    def test_sni_selects_the_certificate_exact_then_wildcard_then_the_first(self):
        sg = self.start()
        for name, cn in (("a.test", "a.test"), ("b.test", "b.test"), ("x.wild.test", "b.test")):
            with self.subTest(name):
                s = self.connect(sg, name)
                self.assertEqual(peer_cn(s), cn)
                s.close()
        # An unknown name (and no name at all) gets the first certificate.
        loose = tls_client_context(self.c.ca)
        loose.check_hostname = False
        for name in ("unknown.test", None):
            s = loose.wrap_socket(socket.create_connection(("127.0.0.1", sg.port), timeout=10), server_hostname=name)
            self.assertEqual(peer_cn(s), "a.test")
            s.close()
        # Two labels in front of a wildcard are not matched by it.
        loose_s = loose.wrap_socket(socket.create_connection(("127.0.0.1", sg.port), timeout=10),
                                    server_hostname="y.x.wild.test")
        self.assertEqual(peer_cn(loose_s), "a.test")
        loose_s.close()

    def test_proxied_over_tls_with_forwarded_proto_keep_alive_and_bodies(self):
        sg = self.start()
        c = Client(sg.port, tls=tls_client_context(self.c.ca), server_hostname="a.test")
        for i in range(20):  # one connection, many requests
            body = os.urandom(1000 * i).hex().encode()
            r = c.request("POST", f"/echo/{i}", [("Content-Type", "text/plain")], body, host="a.test")
            self.assertEqual(r.status, 200)
            info = r.json()
            self.assertEqual(info["body"], body.decode())
            hdrs = {k.lower(): v for k, v in info["headers"]}
            self.assertEqual(hdrs.get("x-forwarded-proto"), "https")
        big = c.request("GET", "/big?n=3000000", host="a.test")
        self.assertEqual(len(big.body), 3000000)
        chunked = c.request("GET", "/chunked", host="a.test")
        self.assertEqual(chunked.body, b"hello world")
        c.close()
        self.assertGreaterEqual(sg.metric("stealgate_tls_handshakes_total", listener="public", version="TLSv1.3",
                                          resumed="false"), 1)

    def test_curl_is_served_and_negotiates_http11_by_alpn(self):
        sg = self.start()
        out = subprocess.run(["curl", "-sS", "-v", "--cacert", self.c.ca, "--resolve", f"b.test:{sg.port}:127.0.0.1",
                              f"https://b.test:{sg.port}/curl"], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("ALPN: server accepted http/1.1", out.stderr)
        self.assertEqual(json.loads(out.stdout)["target"], "/curl")

    def test_sessions_resume_by_ticket_across_a_reload(self):
        sg = self.start()
        ctx = tls_client_context(self.c.ca)
        s = self.connect(sg, "a.test", ctx)
        s.sendall(b"GET /one HTTP/1.1\r\nHost: a.test\r\n\r\n")
        s.recv(65536)  # the response, after the TLS 1.3 tickets
        session = s.session
        s.close()
        self.assertTrue(sg.reload())  # the ticket keys survive a reload
        s2 = ctx.wrap_socket(socket.create_connection(("127.0.0.1", sg.port), timeout=10), server_hostname="a.test",
                             session=session)
        self.assertTrue(s2.session_reused)
        # A resumed TLS 1.3 connection gets a fresh ticket too (RFC 8446 C.4: a client
        # should not use a ticket twice). The ticket also carries the ACK of the client's
        # Finished: without it a client with Nagle on (Python's, by default) held its request
        # for the server's delayed ACK, 40 ms.
        s2.sendall(b"GET /two HTTP/1.1\r\nHost: a.test\r\n\r\n")
        s2.recv(65536)
        self.assertNotEqual(s2.session.id, session.id, "no new ticket on the resumed connection")
        s2.close()
        # The client is done with its handshake before the server has read its Finished.
        sg.wait_for(lambda: sg.metric("stealgate_tls_handshakes_total", listener="public", version="TLSv1.3",
                                      resumed="true") >= 1, 5 * TIMEOUT_SCALE, "the resumed handshake was not counted")

    def tickets(self, sg, session_file, resume):
        """TLS 1.3 tickets the server sent on one connection (openssl s_client prints each)."""
        arg = "-sess_in" if resume else "-sess_out"
        out = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{sg.port}", "-servername", "a.test",
                              "-CAfile", self.c.ca, "-ign_eof", arg, session_file],
                             input=b"GET /t HTTP/1.0\r\nHost: a.test\r\n\r\n", capture_output=True, timeout=30)
        text = out.stdout.decode(errors="replace")
        self.assertIn("HTTP/1.1 200", text, out.stderr.decode(errors="replace"))
        self.assertEqual("Reused," in text, resume, "resumption was not as expected")
        return text.count("New Session Ticket arrived")

    def test_tickets_per_full_handshake_is_configurable_and_a_resumption_gets_one(self):
        session_file = os.path.join(self.c.dir, "session.pem")
        for extra, after_full in (("", 1), ("tickets_per_handshake: 3", 3)):
            with self.subTest(extra=extra):
                sg = self.start(extra)
                self.assertEqual(self.tickets(sg, session_file, resume=False), after_full)
                self.assertEqual(self.tickets(sg, session_file, resume=True), 1)
                sg.stop()
        sg = self.start("tickets_per_handshake: 0")
        self.assertEqual(self.tickets(sg, session_file, resume=False), 0)

    def test_min_version_refuses_older_clients(self):
        sg = self.start("min_version: \"1.3\"")
        old = tls_client_context(self.c.ca)
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        with self.assertRaises(ssl.SSLError):
            self.connect(sg, "a.test", old)
        self.assertEqual(self.get(sg).status, 200)  # 1.3 still works
        sg.wait_for(lambda: sg.metric("stealgate_tls_handshake_failures_total", listener="public",
                                      reason="version") >= 1, 5, "no version failure counted")

    def test_plain_http_on_a_tls_port_gets_a_readable_400(self):
        sg = self.start()
        s = socket.create_connection(("127.0.0.1", sg.port), timeout=10)
        s.sendall(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        s.close()
        self.assertTrue(data.startswith(b"HTTP/1.1 400 "), data)
        self.assertIn(b"https://", data)
        self.assertEqual(sg.metric("stealgate_tls_handshake_failures_total", listener="public", reason="not_tls"), 1)

    def test_a_silent_client_is_dropped_at_the_handshake_timeout(self):
        sg = self.start("handshake_timeout: 300ms")
        s = socket.create_connection(("127.0.0.1", sg.port), timeout=10)
        t0 = time.monotonic()
        self.assertEqual(s.recv(1), b"")  # closed without a byte
        self.assertLess(time.monotonic() - t0, 5 * TIMEOUT_SCALE)
        s.close()
        self.assertEqual(sg.metric("stealgate_tls_handshake_failures_total", listener="public", reason="timeout"), 1)

    def test_half_a_record_is_waited_for_not_spun_on(self):
        # A client that sends only part of a TLS record (between requests, or slowly on
        # purpose) leaves ciphertext that OpenSSL holds but cannot decrypt yet. That is no
        # reason to look again at once: the worker must wait for the socket, not spin until
        # the rest arrives (a cheap way to take a worker away from everyone else).
        sg = self.start()
        raw = socket.create_connection(("127.0.0.1", sg.port), timeout=10)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = tls_client_context(self.c.ca).wrap_bio(incoming, outgoing, server_hostname="a.test")

        def flush():
            data = outgoing.read()
            if data:
                raw.sendall(data)

        def pump_in():
            data = raw.recv(65536)
            self.assertTrue(data, "the server closed the connection")
            incoming.write(data)

        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                flush()
                pump_in()
        flush()
        tls.write(b"GET /echo HTTP/1.1\r\nHost: a.test\r\n\r\n")
        record = outgoing.read()
        self.assertGreater(len(record), 20)
        raw.sendall(record[:len(record) // 2])

        c0 = sg.cpu_seconds()
        time.sleep(1.0)
        used = sg.cpu_seconds() - c0
        self.assertLess(used, 0.3, f"stealgate used {used:.2f} s of CPU in 1 s while waiting for half a record")
        raw.sendall(record[len(record) // 2:])
        reply = b""
        while b"\r\n\r\n" not in reply:
            try:
                reply += tls.read(65536)
            except ssl.SSLWantReadError:
                pump_in()
        self.assertTrue(reply.startswith(b"HTTP/1.1 200"), reply[:100])
        raw.close()

    def client_ctx(self, who=None):
        ctx = tls_client_context(self.c.ca)
        if who is not None:
            ctx.load_cert_chain(*who)
        return ctx

    def test_required_client_certificates(self):
        sg = self.start(f"client_auth: required\nclient_ca: {self.c.ca}")
        r = self.get(sg, ctx=self.client_ctx(self.alice), headers=[("X-Client-Cert-Subject", "CN=root")])
        self.assertEqual(r.status, 200)
        hdrs = [(k.lower(), v) for k, v in r.json()["headers"]]
        # The verified subject, and only it: the client's own header of that name is gone.
        self.assertEqual([v for k, v in hdrs if k == "x-client-cert-subject"], ["CN=alice"])
        for who in (None, self.mallory):  # no certificate; one from a CA nobody trusts
            with self.subTest(who=who and "mallory"):
                with self.assertRaises((ssl.SSLError, ConnectionError, EOFError)):
                    self.get(sg, ctx=self.client_ctx(who))
        sg.wait_for(lambda: sg.metric("stealgate_tls_handshake_failures_total", listener="public",
                                      reason="client_certificate") >= 2, 5, "refused client certificates not counted")

    def test_optional_client_certificates_never_pass_a_forged_subject(self):
        sg = self.start(f"client_auth: optional\nclient_ca: {self.c.ca}\nclient_subject_header: X-Who")
        anon = self.get(sg, ctx=self.client_ctx(), headers=[("X-Who", "CN=alice")])
        self.assertEqual(anon.status, 200)
        self.assertNotIn("x-who", [k.lower() for k, _ in anon.json()["headers"]])
        alice = self.get(sg, ctx=self.client_ctx(self.alice))
        self.assertIn(["X-Who", "CN=alice"], alice.json()["headers"])
        # Nor in a trailer, which an upstream merging trailers would take as the subject.
        c = Client(sg.port, tls=self.client_ctx(), server_hostname="a.test")
        c.send(b"POST /echo HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"1\r\nx\r\n0\r\nX-Who: CN=alice\r\nX-Sum: 1\r\n\r\n")
        self.assertEqual(c.read_response().json()["trailers"], {"x-sum": "1"})
        c.close()

    def test_a_reload_swaps_certificates_while_keep_alive_connections_keep_working(self):
        d = self.c.dir
        a2 = self.c.leaf("a2", "a.test", ["a.test"])
        live_cert, live_key = os.path.join(d, "live.pem"), os.path.join(d, "live.key")
        shutil.copy(self.a[0], live_cert)
        shutil.copy(self.a[1], live_key)
        sg = self.start(certificates=[(live_cert, live_key)])
        kept = Client(sg.port, tls=tls_client_context(self.c.ca), server_hostname="a.test")
        self.assertEqual(kept.request("GET", "/before", host="a.test").status, 200)
        serial_before = self.connect(sg, "a.test").getpeercert()["serialNumber"]
        shutil.copy(a2[0], live_cert)
        shutil.copy(a2[1], live_key)
        self.assertTrue(sg.reload())
        self.assertNotEqual(self.connect(sg, "a.test").getpeercert()["serialNumber"], serial_before)
        self.assertEqual(kept.request("GET", "/after", host="a.test").status, 200)
        kept.close()

    def test_bad_certificate_files_are_config_errors_and_a_reload_keeps_the_old_ones(self):
        expired = self.c.leaf("expired", "a.test", ["a.test"], days=-1)
        stray = self.c.stray_key()
        cases = [
            ((expired[0], expired[1]), "expired"),
            ((self.a[0], stray), "does not match the certificate"),
            ((os.path.join(self.c.dir, "missing.pem"), self.a[1]), "cannot read: No such file or directory"),
            ((self.a[1], self.a[1]), "not a PEM certificate"),  # a key where the certificate belongs
        ]
        sg = self.start()
        for pair, why in cases:
            with self.subTest(why):
                text = app_config(self.up, tls_listener([pair]))
                path = os.path.join(self.c.dir, "bad.yaml")
                with open(path, "w") as f:
                    f.write(text)
                out = subprocess.run([os.environ["STEALGATE_BIN"], "--check-config", path], capture_output=True,
                                     text=True, timeout=30)
                self.assertEqual(out.returncode, 1)
                self.assertRegex(out.stdout + out.stderr, r"bad\.yaml:\d+:\d+: listeners\[0\]\.tls\.certificates\[0\]: ")
                self.assertIn(why, out.stdout + out.stderr)
                self.assertFalse(sg.reload(text))
                self.assertEqual(self.get(sg).status, 200)


class UpstreamTlsTest(unittest.TestCase):
    """clusters[].tls: TLS to the endpoints, verified by default."""

    @classmethod
    def setUpClass(cls):
        cls.c = certs_mod.Certs()
        cls.up_cert = cls.c.leaf("up", "up.test", ["up.test", "IP:127.0.0.1"])
        cls.client = cls.c.leaf("gw", "stealgate-gateway", client=True)
        cls.up = Upstream("secure", tls=cls.up_cert)

    @classmethod
    def tearDownClass(cls):
        cls.up.stop()

    def start(self, tls, up=None):
        up = up or self.up
        sg = Stealgate(config(
            clusters=f"  - name: app\n    endpoints: [{up.address}]\n    tls: {{ {tls} }}\n",
            routes="  - name: app\n    match: { path_prefix: / }\n    cluster: app\n"))
        self.addCleanup(sg.stop)
        return sg

    def test_verified_by_name_with_sni(self):
        sg = self.start(f"sni: up.test, ca: {self.c.ca}")
        self.up.clear_log()
        c = Client(sg.port)
        for _ in range(5):  # one pooled TLS connection serves them all
            self.assertEqual(c.request("GET", "/x").status, 200)
        c.close()
        log = self.up.log()
        self.assertEqual({e["sni"] for e in log}, {"up.test"})
        self.assertEqual(len({e["conn"] for e in log}), 1, "the pooled TLS connection was not reused")

    def test_new_connections_resume_the_endpoints_session(self):
        sg = self.start(f"sni: up.test, ca: {self.c.ca}")
        self.up.clear_log()
        c = Client(sg.port)
        for i in range(4):  # the upstream closes each connection: every request opens one
            self.assertEqual(c.request("GET", f"/close-after?n={i}").status, 200)
        c.close()
        resumed = [e["resumed"] for e in self.up.log()]
        self.assertEqual(resumed, [False, True, True, True], "later connections did not resume the first's session")
        self.assertEqual(sg.metric("stealgate_upstream_tls_handshakes_total", cluster="app", resumed="false"), 1)
        self.assertEqual(sg.metric("stealgate_upstream_tls_handshakes_total", cluster="app", resumed="true"), 3)
        # A reload keeps the endpoint and its session while the cluster's TLS settings stay;
        # other settings start without one.
        self.assertTrue(sg.reload())
        self.up.clear_log()
        self.assertEqual(Client(sg.port).request("GET", "/close-after?after-reload").status, 200)
        self.assertEqual([e["resumed"] for e in self.up.log()], [True])
        with open(sg.config_path) as f:
            text = f.read()
        self.assertTrue(sg.reload(text.replace("sni: up.test,", "sni: up.test, min_version: \"1.3\",")))
        self.up.clear_log()
        self.assertEqual(Client(sg.port).request("GET", "/close-after?other-settings").status, 200)
        self.assertEqual([e["resumed"] for e in self.up.log()], [False])

    def test_an_ip_endpoint_is_verified_against_the_certificates_addresses(self):
        sg = self.start(f"ca: {self.c.ca}")
        self.up.clear_log()
        self.assertEqual(Client(sg.port).request("GET", "/ip").status, 200)
        self.assertEqual([e["sni"] for e in self.up.log()], [None])  # no SNI for an IP literal

    def test_a_certificate_for_another_name_or_from_an_unknown_ca_is_refused_with_a_reason(self):
        for tls, why in ((f"sni: other.test, ca: {self.c.ca}", "hostname mismatch"),
                         (f"sni: up.test, ca: {self.c.other_ca}", "unable to get local issuer certificate"),
                         ("sni: up.test", "unable to get local issuer certificate")):  # the system store
            with self.subTest(tls):
                sg = self.start(tls)
                r = Client(sg.port).request("GET", "/refused")
                self.assertEqual(r.status, 502)
                sg.wait_log(r"upstream TLS handshake with 127\.0\.0\.1:\d+ failed: certificate verify failed \(" + why)
                self.assertGreaterEqual(sg.metric("stealgate_upstream_connect_errors_total", cluster="app"), 1)
                sg.stop()

    def test_health_checks_speak_tls(self):
        sg = Stealgate(config(
            clusters=(f"  - name: app\n    endpoints: [{self.up.address}]\n    tls: {{ sni: up.test, ca: {self.c.ca} }}\n"
                      "    health_check: { path: /health, interval: 50ms, unhealthy_threshold: 1 }\n"),
            routes="  - name: app\n    match: { path_prefix: / }\n    cluster: app\n"))
        self.addCleanup(sg.stop)
        self.up.clear_log()
        sg.wait_for(lambda: sum(e["target"] == "/health" for e in self.up.log()) >= 3, 5 * TIMEOUT_SCALE,
                    "no health checks reached the TLS upstream")
        self.assertEqual({e["sni"] for e in self.up.log() if e["target"] == "/health"}, {"up.test"})
        self.assertEqual(Client(sg.port).request("GET", "/after-checks").status, 200)  # still healthy

    def test_verification_can_be_turned_off(self):
        sg = self.start("sni: anything.test, verify: false")
        self.assertEqual(Client(sg.port).request("GET", "/unverified").status, 200)

    def test_a_client_certificate_for_an_upstream_that_requires_one(self):
        strict = Upstream("strict", tls=self.up_cert + (self.c.ca,))
        self.addCleanup(strict.stop)
        without = self.start(f"sni: up.test, ca: {self.c.ca}", up=strict)
        self.assertEqual(Client(without.port).request("GET", "/anonymous").status, 502)
        with_cert = self.start(f"sni: up.test, ca: {self.c.ca}, cert: {self.client[0]}, key: {self.client[1]}", up=strict)
        r = Client(with_cert.port).request("GET", "/with-cert")
        self.assertEqual(r.status, 200, r.body)


if __name__ == "__main__":
    main()
