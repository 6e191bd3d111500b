"""Writes the fuzz targets' seed corpora from the tests, so seeds follow the tests:
the malformed-request corpus (tests/integration/test_malformed.py), the deny-route spellings
(tests/integration/test_hostile.py), the shipped and test configurations, and a few valid
messages of each kind. Each target's first input byte is its mode byte (see the targets).

    python3 tests/fuzz/seeds.py OUTDIR      # OUTDIR/<target>/seed-N
"""
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import harness  # noqa: E402
import test_hostile  # noqa: E402
import test_malformed  # noqa: E402

VALID_REQUESTS = [
    "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    "GET /a/b?x=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t\r\nAccept: */*\r\n\r\n",
    "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
    "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    "GET http://example.com:8080/x/../y?q HTTP/1.1\r\nHost: other\r\n\r\n",
    "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMA\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx",
    "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\t5\t\r\nConnection: x-a, close\r\nX-A: 1\r\n\r\nhello",
]

RESPONSES = [
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: 42\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close body",
    "HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
    "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
    "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
    "this is not http\r\n\r\n",
]

CHUNKED = [
    "5\r\nhello\r\n0\r\n\r\n",
    "5;a=b\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n",
    "1\r\nx\r\n0\r\n\r\n",
    "ffffffffffffffffff\r\n",
    "5\r\nhel",
    "0\r\n\r\n",
    "5 \r\nhello\r\n0\r\n\r\n",
    "5\nhello\n0\n\n",
]

RFC_PATHS = ["/b/c/./../g", "/a/b/c/./../../g", "/b/c/g;x=1/../y", "/%7Euser/a%2fb", "/a\\b\\..\\c", "/."]

ROUTE_SPECS = ["", "upgrades: websocket\nX-Remove\nX-Set: v\n", "upgrades: h2c websocket\nconnection\nhost\n"]


def configs():
    out = []
    for pattern in ("config/*.yaml", "tests/bench/*.yaml"):
        for path in sorted(glob.glob(os.path.join(ROOT, pattern))):
            with open(path, encoding="utf-8") as f:
                out.append(f.read())
    out.append(harness.config(clusters="  - name: app\n    endpoints: [127.0.0.1:1]\n",
                              routes=test_hostile.DENY_ROUTES))
    out.append(harness.config(listeners="  - name: p\n    address: 127.0.0.1:0\n    path_normalization: reject\n"
                                         "    escaped_slashes: decode\n",
                              routes="  - name: d\n    direct_response: { status: 200 }\n    upgrades: []\n"))
    return out


# What load balancers send first (tests/unit/io/proxy_protocol_test.cpp has the same).
_V2 = b"\r\n\r\n\x00\r\nQUIT\n"
PROXY_HEADERS = [
    b"PROXY TCP4 203.0.113.7 127.0.0.1 51234 80\r\nGET / HTTP/1.1\r\n\r\n",
    b"PROXY TCP6 2001:db8::7 ::1 51234 443\r\n\x16\x03\x01",
    b"PROXY UNKNOWN\r\n",
    _V2 + b"\x21\x11\x00\x0c" + bytes([203, 0, 113, 7, 127, 0, 0, 1, 0xc8, 0x22, 0, 80]) + b"GET /",
    _V2 + b"\x21\x21\x00\x27" + bytes(16) + bytes(15) + b"\x01" + b"\x01\xbb\x00\x50" + b"\x04\x00\x00",
    _V2 + b"\x20\x00\x00\x00",
]


def corpora():
    malformed = [wire for _, wire, _ in test_malformed.CASES]
    requests = VALID_REQUESTS + malformed
    paths = test_hostile.PATH_SPELLINGS + RFC_PATHS
    return {
        "request": [bytes([i % 64]) + w.encode("latin-1") for i, w in enumerate(requests)],
        "response": [bytes([i % 2]) + r.encode("latin-1") for i, r in enumerate(RESPONSES)],
        "chunked": [bytes([i % 32]) + c.encode("latin-1") for i, c in enumerate(CHUNKED)],
        "path": [bytes([mode]) + p[1:].encode("latin-1") for p in paths for mode in (0, 2, 4, 1)],
        "header_rules": [w.encode("latin-1") + b"\0" + spec.encode() for w in requests for spec in ROUTE_SPECS],
        "config": [c.encode() for c in configs()],
        "proxy_header": PROXY_HEADERS,
    }


def main():
    out = sys.argv[1]
    for target, seeds in corpora().items():
        d = os.path.join(out, target)
        os.makedirs(d, exist_ok=True)
        for i, s in enumerate(seeds):
            with open(os.path.join(d, f"seed-{i}"), "wb") as f:
                f.write(s)
    print(f"seeds: {', '.join(f'{t} {len(s)}' for t, s in corpora().items())} in {out}")


if __name__ == "__main__":
    main()
