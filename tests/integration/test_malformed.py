"""Malformed and ambiguous requests through the real binary: each gets the right 4xx/5xx,
the connection is closed, and nothing reaches the upstream (RFC 9112 framing rules,
../shared/HTTP.md)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Client, Stealgate, Upstream, config, main  # noqa: E402

H = "Host: h\r\n"
CASES = [
    ("CL with TE", f"POST / HTTP/1.1\r\n{H}Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("TE with CL", f"POST / HTTP/1.1\r\n{H}Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n", 400),
    ("two different CL", f"POST / HTTP/1.1\r\n{H}Content-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400),
    ("CL list", f"POST / HTTP/1.1\r\n{H}Content-Length: 2, 2\r\n\r\nab", 400),
    ("CL plus", f"POST / HTTP/1.1\r\n{H}Content-Length: +2\r\n\r\nab", 400),
    ("TE not chunked", f"POST / HTTP/1.1\r\n{H}Transfer-Encoding: gzip\r\n\r\nxx", 400),
    ("TE gzip, chunked", f"POST / HTTP/1.1\r\n{H}Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501),
    ("TE twice", f"POST / HTTP/1.1\r\n{H}Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("TE on 1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("bad chunk size", f"POST / HTTP/1.1\r\n{H}Transfer-Encoding: chunked\r\n\r\nxyz\r\n", 400),
    ("obs-fold", f"GET / HTTP/1.1\r\n{H}X-A: a\r\n b\r\n\r\n", 400),
    ("space before colon", "GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400),
    ("NUL in value", f"GET / HTTP/1.1\r\n{H}X-A: a\x00b\r\n\r\n", 400),
    ("bare LF", "GET / HTTP/1.1\nHost: h\n\n", 400),
    ("missing Host", "GET / HTTP/1.1\r\nX-A: 1\r\n\r\n", 400),
    ("duplicate Host", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    ("TRACE (it would echo what stealgate adds)", f"TRACE / HTTP/1.1\r\n{H}\r\n", 501),
    ("fragment in target", f"GET /a#b HTTP/1.1\r\n{H}\r\n", 400),
    ("HTTP/2.0 version", f"GET / HTTP/2.0\r\n{H}\r\n", 505),
    ("malformed version", f"GET / HTTP/1.x\r\n{H}\r\n", 400),
    ("long target", "GET /" + "a" * (16 * 1024 + 1) + f" HTTP/1.1\r\n{H}\r\n", 414),
    ("huge header", f"GET / HTTP/1.1\r\n{H}X-Big: " + "b" * 40000 + "\r\n\r\n", 431),
    ("unknown method", f"BREW / HTTP/1.1\r\n{H}\r\n", 501),
    ("CONNECT", f"CONNECT example.com:443 HTTP/1.1\r\n{H}\r\n", 501),
    ("double space", f"GET  / HTTP/1.1\r\n{H}\r\n", 400),
    ("unsupported expectation", f"GET / HTTP/1.1\r\n{H}Expect: tea\r\n\r\n", 417),
]


class MalformedTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = Upstream("u")
        cls.sg = Stealgate(config(
            clusters=f"  - name: app\n    endpoints: [{cls.up.address}]\n",
            routes="  - name: app\n    match: { path_prefix: / }\n    cluster: app\n"))

    @classmethod
    def tearDownClass(cls):
        cls.sg.stop()
        cls.up.stop()

    def assert_nothing_forwarded(self, what):
        # A valid request after the refused ones is a barrier: once its answer is back,
        # whatever stealgate forwarded before it has reached the upstream's log.
        c = Client(self.sg.port)
        self.assertEqual(c.request("GET", "/barrier").status, 200)
        c.close()
        self.assertEqual([e["target"] for e in self.up.log()], ["/barrier"], what)

    def test_corpus(self):
        self.up.clear_log()
        for name, wire, status in CASES:
            with self.subTest(name):
                c = Client(self.sg.port)
                c.send(wire.encode("latin-1"))
                r = c.read_response()
                self.assertEqual(r.status, status, name)
                self.assertEqual(r.header("connection"), "close", name)
                self.assertTrue(c.closed_by_peer(), f"{name}: connection left open")
                c.close()
        self.assert_nothing_forwarded("a malformed request reached the upstream")

    def test_smuggling_attempt_never_splits_into_two_upstream_requests(self):
        # A classic CL.TE desync: must be rejected outright, never forwarded in any form.
        self.up.clear_log()
        c = Client(self.sg.port)
        c.send(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"0\r\n\r\nGET /admin HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertEqual(c.read_response().status, 400)
        self.assertTrue(c.closed_by_peer())
        self.assert_nothing_forwarded("a part of the smuggled request reached the upstream")

    def test_valid_request_after_a_bad_connection_still_works(self):
        bad = Client(self.sg.port)
        bad.send(b"GET / HTTP/1.1\r\nHost : h\r\n\r\n")
        self.assertEqual(bad.read_response().status, 400)
        self.assertTrue(bad.closed_by_peer())
        bad.close()
        c = Client(self.sg.port)
        self.assertEqual(c.request("GET", "/fine").status, 200)
        c.close()


if __name__ == "__main__":
    main()
