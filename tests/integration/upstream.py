"""A scriptable HTTP/1.1 upstream for stealgate's integration tests.

Run as a process: `python3 upstream.py [--port N] [--name NAME]`; it prints `PORT <n>` on
stdout once listening. Behaviour is chosen by the request path (see handle()). It records
every request it receives; GET /__log (sent directly, not through the proxy) returns them as
JSON and DELETE /__log clears them.
"""
import argparse
import json
import os
import random
import socket
import socketserver
import ssl
import struct
import sys
import threading
import time

LOG = []
LOG_LOCK = threading.Lock()
CONN_IDS = iter(range(1, 1 << 62))
CONN_LOCK = threading.Lock()
NAME = "upstream"
DELAY_MS = 0       # --delay-ms: every echo response waits this long
FAIL_STATUS = 0    # --fail-status: every echo response has this status
KEEP_LOG = True    # --no-log: record nothing (long soak runs)
TLS = None         # --tls-cert/--tls-key: an ssl.SSLContext; connections speak TLS


class Conn:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def read_until(self, marker):
        while marker not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buf += data
        i = self.buf.index(marker) + len(marker)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def read_n(self, n):
        while len(self.buf) < n:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buf += data
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_request(self):
        head = self.read_until(b"\r\n\r\n")
        if head is None:
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ", 2)
        headers = []
        for line in lines[1:]:
            if not line:
                continue
            k, v = line.split(":", 1)
            headers.append((k.strip(), v.strip()))
        hmap = {}
        for k, v in headers:
            hmap.setdefault(k.lower(), []).append(v)
        body = b""
        trailers = {}
        if "chunked" in ",".join(hmap.get("transfer-encoding", [])).lower():
            if "100-continue" in ",".join(hmap.get("expect", [])):
                pass  # the handler decides when to send 100
            while True:
                size_line = self.read_until(b"\r\n")
                if size_line is None:
                    return None
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    while True:
                        t = self.read_until(b"\r\n")
                        if t is None or t == b"\r\n":
                            break
                        k, v = t.decode("latin-1").split(":", 1)
                        trailers[k.strip().lower()] = v.strip()
                    break
                body += self.read_n(size)
                self.read_n(2)
        elif "content-length" in hmap:
            n = int(hmap["content-length"][0])
            if "100-continue" in ",".join(hmap.get("expect", [])).lower() and not target.startswith("/no-continue"):
                if target.startswith("/reject-continue"):
                    return {"method": method, "target": target, "version": version, "headers": headers,
                            "hmap": hmap, "body": None, "trailers": {}}
                self.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            body = self.read_n(n) if n else b""
        return {"method": method, "target": target, "version": version, "headers": headers, "hmap": hmap,
                "body": body, "trailers": trailers}


def respond(sock, status, body=b"", headers=None, reason="OK"):
    hdrs = headers or []
    out = f"HTTP/1.1 {status} {reason}\r\n".encode()
    names = [k.lower() for k, _ in hdrs]
    if "content-length" not in names and "transfer-encoding" not in names:
        hdrs = hdrs + [("Content-Length", str(len(body)))]
    for k, v in hdrs:
        out += f"{k}: {v}\r\n".encode()
    out += b"\r\n" + body
    sock.sendall(out)


def tls_peer(sock):
    """The client certificate's subject CN on a TLS connection, else None."""
    if not isinstance(sock, ssl.SSLSocket):
        return None
    cert = sock.getpeercert()
    return dict(x[0] for x in cert["subject"]).get("commonName") if cert else None


def pattern_bytes(n):
    """n bytes that differ at every offset from any shift of themselves (a check of order)."""
    return random.Random(n).randbytes(n)


def handle(conn, req, conn_id):
    s = conn.sock
    path, _, query = req["target"].partition("?")
    params = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
    if path != "/__log" and KEEP_LOG:
      with LOG_LOCK:
        LOG.append({"method": req["method"], "target": req["target"], "headers": req["headers"],
                    "body_len": len(req["body"] or b""), "trailers": req["trailers"], "conn": conn_id,
                    "upstream": NAME, "sni": getattr(s, "sni", None), "client_cert": tls_peer(s),
                    "resumed": s.session_reused if isinstance(s, ssl.SSLSocket) else None})
    if path == "/__log":
        with LOG_LOCK:
            if req["method"] == "DELETE":
                LOG.clear()
            data = json.dumps(LOG).encode()
        respond(s, 200, data, [("Content-Type", "application/json")])
        return True
    if path.startswith("/status/"):
        code = int(path.split("/")[2])
        respond(s, code, f"status {code} from {NAME}\n".encode(), [("X-Upstream", NAME)], reason="X")
        return True
    if path == "/slow":
        time.sleep(int(params.get("ms", "1000")) / 1000)
        respond(s, 200, f"slow {NAME}\n".encode(), [("X-Upstream", NAME)])
        return True
    if path == "/chunked":
        s.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n"
                  b"5\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 42\r\n\r\n")
        return True
    if path == "/close-delimited":
        s.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close body")
        return False
    if path == "/garbage":
        s.sendall(b"this is not http\r\n\r\n")
        return False
    if path == "/conflicting-cl":
        s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!")
        return False
    if path == "/status-600":
        s.sendall(b"HTTP/1.1 600 Beyond\r\nContent-Length: 6\r\n\r\nbeyond")
        return False
    if path == "/gzip-coded":
        # A transfer coding other than chunked; the body would run until close.
        s.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n\x1f\x8b coded bytes")
        return False
    if path == "/reset-mid-body":
        # Announces n bytes (100 by default), sends a tenth of them, then resets.
        n = int(params.get("n", "100"))
        s.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n".encode() + pattern_bytes(n)[: n // 10])
        time.sleep(0.05)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        return False
    if path == "/early-hints":
        s.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n")
        respond(s, 200, b"after hints", [("X-Upstream", NAME)])
        return True
    if path == "/big":
        n = int(params.get("n", "1048576"))
        chunk = b"x" * 65536
        s.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n".encode())
        sent = 0
        while sent < n:
            part = chunk[: min(len(chunk), n - sent)]
            s.sendall(part)
            sent += len(part)
        return True
    if path == "/one-write":
        respond(s, 200, b"w" * int(params.get("n", "12000")))  # head and body in one write
        return True
    if path == "/big-header":
        n = int(params.get("n", "30000"))
        s.sendall(b"HTTP/1.1 200 OK\r\nX-Big: " + b"h" * n + b"\r\nContent-Length: 2\r\n\r\nok")
        return True
    if path == "/head-me":
        body = b"a body of 27 bytes for GET\n"
        if req["method"] == "HEAD":
            s.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode())
        else:
            respond(s, 200, body)
        return True
    if path == "/no-content":
        s.sendall(b"HTTP/1.1 204 No Content\r\nX-Upstream: " + NAME.encode() + b"\r\n\r\n")
        return True
    if path == "/ws":
        if req["hmap"].get("upgrade", [""])[0].lower() != "websocket":
            respond(s, 400, b"not an upgrade")
            return True
        s.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
        if conn.buf:
            s.sendall(b"echo:" + conn.buf)
            conn.buf = b""
        while True:
            data = s.recv(65536)
            if not data:
                return False
            s.sendall(b"echo:" + data)
    if path == "/h2c":
        # An upstream that speaks h2c: it switches whenever it is asked to (the smuggling
        # vector when a proxy forwards Upgrade: h2c).
        if "h2c" in ",".join(req["hmap"].get("upgrade", [])).lower():
            s.sendall(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
            return False
        respond(s, 200, b"plain http/1.1", [("X-Upstream", NAME)])
        return True
    if path.startswith("/always-101"):
        # Switches protocols whether or not it was asked (to ?to=, default websocket).
        proto = params.get("to", "websocket")
        s.sendall(f"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: {proto}\r\n\r\n".encode())
        time.sleep(0.2)
        return False
    if path == "/reject-continue":
        respond(s, 417, b"no thanks\n")
        return False
    if path == "/trickle":
        # n bytes (10 by default): all but the last 5, a pause, then those.
        n = int(params.get("n", "10"))
        body = pattern_bytes(n)
        s.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n".encode() + body[:-5])
        time.sleep(int(params.get("ms", "3000")) / 1000)
        s.sendall(body[-5:])
        return True
    if path == "/pattern":
        # n bytes that pattern_bytes(n) reproduces, and which connection served them.
        n = int(params.get("n", "65536"))
        s.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nX-Conn: {conn_id}\r\n\r\n".encode() + pattern_bytes(n))
        return True
    if path == "/stream-head":
        # A streaming response: the head alone, the body only after a pause.
        s.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        time.sleep(int(params.get("ms", "800")) / 1000)
        s.sendall(b"5\r\nhello\r\n0\r\n\r\n")
        return True
    if path in ("/then-close", "/then-408"):
        # Answers as if the connection stays open, then ends it while it sits idle in the
        # proxy's pool: silently, or (as some servers do at their idle timeout) with an
        # unsolicited 408 first.
        respond(s, 200, json.dumps({"conn": conn_id}).encode(), [("Content-Type", "application/json")])
        time.sleep(int(params.get("ms", "20")) / 1000)
        if path == "/then-408":
            s.sendall(b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
        return False
    if path == "/close-after":
        respond(s, 200, b"bye", [("Connection", "close")])
        return False
    # default: echo (optionally slow or failing, to tell endpoints apart)
    if DELAY_MS:
        time.sleep(DELAY_MS / 1000)
    if FAIL_STATUS:
        respond(s, FAIL_STATUS, f"failing {NAME}\n".encode(), [("X-Upstream", NAME)], reason="Fail")
        return True
    info = {"method": req["method"], "target": req["target"], "headers": req["headers"],
            "body": (req["body"] or b"").decode("latin-1"), "trailers": req["trailers"], "conn": conn_id,
            "upstream": NAME}
    respond(s, 200, json.dumps(info).encode(), [("Content-Type", "application/json"), ("X-Upstream", NAME)])
    return True


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        with CONN_LOCK:
            conn_id = next(CONN_IDS)
        sock = self.request
        if TLS is not None:
            try:
                sock = TLS.wrap_socket(sock, server_side=True)
            except (ssl.SSLError, OSError):
                return
        conn = Conn(sock)
        try:
            while True:
                req = conn.read_request()
                if req is None:
                    return
                if not handle(conn, req, conn_id):
                    return
                if "close" in ",".join(req["hmap"].get("connection", [])).lower():
                    return
        except (ConnectionError, OSError, ValueError):
            return


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def main():
    global NAME, DELAY_MS, FAIL_STATUS, KEEP_LOG
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1", help="the loopback address to listen on")
    ap.add_argument("--name", default="upstream")
    ap.add_argument("--delay-ms", type=int, default=0)
    ap.add_argument("--fail-status", type=int, default=0)
    ap.add_argument("--no-log", action="store_true")
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--tls-client-ca", help="require a client certificate from this CA")
    args = ap.parse_args()
    global TLS
    if args.tls_cert:
        TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        TLS.load_cert_chain(args.tls_cert, args.tls_key)

        def remember_sni(sock, name, _ctx):
            sock.sni = name
        TLS.sni_callback = remember_sni
        if args.tls_client_ca:
            TLS.verify_mode = ssl.CERT_REQUIRED
            TLS.load_verify_locations(args.tls_client_ca)
    KEEP_LOG = not args.no_log
    NAME = args.name
    DELAY_MS = args.delay_ms
    FAIL_STATUS = args.fail_status
    srv = Server((args.host, args.port), Handler)
    print(f"PORT {srv.server_address[1]}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
