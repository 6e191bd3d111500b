"""Helpers for stealgate integration tests: start the real binary and real upstream
processes on free ports, and talk HTTP/1.1 over raw sockets.

The stealgate binary comes from $STEALGATE_BIN (meson passes it). Listeners in test configs
use port 0; the harness reads the real ports from stealgate's log lines
("listener NAME on ADDR (port N)", "admin endpoint on ADDR (port N)").
"""
import atexit
import json
import os
import re
import signal
import socket
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("STEALGATE_BIN", os.path.join(HERE, "..", "..", "build", "src", "stealgate"))


def sanitized_binary():
    """True when the stealgate binary is built with AddressSanitizer: its redzones and
    free-quarantine make RSS measurements meaningless."""
    try:
        out = subprocess.run(["ldd", BIN], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "libasan" in out


# What a sanitizer prints when it finds something (ASan, LSan, UBSan, TSan).
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "WARNING: ThreadSanitizer", "SUMMARY: AddressSanitizer", "SUMMARY: UndefinedBehaviorSanitizer")
# One factor for every time bound in the integration tests: scripts/test.sh sets it per build
# (sanitizers slow everything down); 1 in a plain build.
TIMEOUT_SCALE = float(os.environ.get("STEALGATE_TIMEOUT_SCALE", "1"))
RUNNING = []  # Stealgate processes not stopped yet
_TEMP_DIRS = []  # removed when the suite's process exits


def temp_dir(prefix="sgtest-"):
    """A fresh directory under $TMPDIR, removed with everything in it when the suite
    exits (a full run makes about 1,500: they must not pile up in /tmp)."""
    d = tempfile.mkdtemp(prefix=prefix)
    _TEMP_DIRS.append(d)
    return d


@atexit.register
def _remove_temp_dirs():
    for d in _TEMP_DIRS:
        shutil.rmtree(d, ignore_errors=True)


# The one accepted reason to skip: the test cannot mean anything in this build (an RSS bound
# under AddressSanitizer). main() reports such skips (and appends them to the file named by
# $STEALGATE_NOT_APPLICABLE_LOG, which scripts/test.sh prints in its summary); any other
# skip is a failure.
NOT_IN_THIS_BUILD = "not in this build: "
# STEALGATE_TEST_TLS=1 runs a suite over TLS: config()'s default listener terminates TLS
# with a test certificate, and Client speaks TLS to every port stealgate announced as a
# TLS listener (upstreams stay plain).
TLS_MODE = os.environ.get("STEALGATE_TEST_TLS") == "1"
TLS_PORTS = set()


def tls_client_context(cafile=None, cert=None):
    """A client context that trusts the test CA (and presents `cert`, a (cert, key) pair)."""
    import certs  # noqa: E402 (tests/integration/certs.py; imported only where TLS is used)
    ctx = ssl.create_default_context(cafile=cafile or certs.shared().ca)
    if cert:
        ctx.load_cert_chain(*cert)
    return ctx


class Upstream:
    """A tests/integration/upstream.py process."""

    def __init__(self, name="upstream", port=0, delay_ms=0, fail_status=0, keep_log=True, tls=None, host="127.0.0.1"):
        """`tls`: (cert, key) or (cert, key, client_ca) to serve HTTPS (the harness's own
        requests to it, log() and clear_log(), speak TLS too, unverified). `host`: another
        loopback address to listen on (127.0.0.2, ...; log() reaches only 127.0.0.1)."""
        self.name = name
        self.host = host
        self.tls = tls
        self.delay_ms = delay_ms
        self.fail_status = fail_status
        self.keep_log = keep_log
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "upstream.py"), "--port", str(port),
                                      "--host", host, "--name", name, "--delay-ms", str(delay_ms),
                                      "--fail-status", str(fail_status)]
                                     + ([] if keep_log else ["--no-log"])
                                     + (["--tls-cert", tls[0], "--tls-key", tls[1]] if tls else [])
                                     + (["--tls-client-ca", tls[2]] if tls and len(tls) > 2 else []),
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError("upstream did not start")
        self.port = int(line.split()[1])

    @property
    def address(self):
        return f"{self.host}:{self.port}"

    def _own_tls(self):
        if not self.tls:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # (an upstream that requires client certificates has no log())
        return ctx

    def log(self):
        status, _, body = request_once(self.port, "GET", "/__log", tls=self._own_tls())
        return json.loads(body)

    def clear_log(self):
        request_once(self.port, "DELETE", "/__log", tls=self._own_tls())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self):
        port = self.port
        self.stop()
        for _ in range(100):
            try:
                self.__init__(self.name, port, self.delay_ms, self.fail_status, self.keep_log)
                return
            except RuntimeError:
                time.sleep(0.05)
        raise RuntimeError("upstream could not restart")


class RefusingAddress:
    """A loopback address where every connect is refused, for as long as this object lives.

    The port stays bound (not listening): a closed socket's port can be taken by any process
    on the machine, and a test run in parallel once answered 404 on a "dead" upstream."""

    def __init__(self):
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"

    def close(self):
        self._sock.close()


def _place_fds(fds):
    """A preexec_fn that moves `fds` to 3, 4, ... in the child (via high numbers first, so
    that a descriptor already sitting in the target range is not overwritten early)."""
    def place():
        high = [os.dup2(fd, 200 + i) for i, fd in enumerate(fds)]
        for i, fd in enumerate(high):
            os.dup2(fd, 3 + i)
        for fd in high:
            os.close(fd)
    return place


class Stealgate:
    """The real stealgate binary with a YAML config written to a temp file."""

    def __init__(self, config_yaml, env=None, wait_ready=True, inherit=None, binary=None, wrapper=None,
                 config_fifo=False):
        """`inherit`: [(name, socket)] handed over as systemd does (LISTEN_FDS protocol:
        descriptors 3, 4, ... named by LISTEN_FDNAMES, LISTEN_PID the daemon's own pid).
        `env`: variables to set (a value of None removes one). `wrapper`: a command the
        binary runs under (argv prefix). `config_fifo`: the config path is a FIFO, so each
        read of it waits until the test calls write_config (config_yaml is not written)."""
        self.dir = temp_dir()
        self.config_path = os.path.join(self.dir, "stealgate.yaml")
        if config_fifo:
            os.mkfifo(self.config_path)
        else:
            self.write_config(config_yaml)
        self.log_lines = []
        self.log_lock = threading.Lock()
        self.ports = {}
        self.admin_port = None
        full_env = dict(os.environ)
        for k, v in (env or {}).items():
            if v is None:
                full_env.pop(k, None)
            else:
                full_env[k] = v
        argv, extra = list(wrapper or []) + [binary or BIN, "--config", self.config_path], {}
        if inherit:
            full_env["LISTEN_FDS"] = str(len(inherit))
            full_env["LISTEN_FDNAMES"] = ":".join(name for name, _ in inherit)
            # sh's pid is the daemon's once it execs: that is the LISTEN_PID systemd would set.
            argv = ["/bin/sh", "-c", 'LISTEN_PID=$$; export LISTEN_PID; exec "$0" "$@"'] + argv
            extra = {"pass_fds": tuple(range(3, 3 + len(inherit))),
                     "preexec_fn": _place_fds([sock.fileno() for _, sock in inherit])}
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=full_env, errors="replace", **extra)
        RUNNING.append(self)
        self.reader = threading.Thread(target=self._read_log, daemon=True)
        self.reader.start()
        if wait_ready:
            self.wait_ready()

    def wait_ready(self):
        self.wait_for(lambda: self.admin_port is not None and self.ports, 10, "stealgate did not start")
        self.wait_for(lambda: self.admin_get("/ready")[0] == 200, 10, "stealgate not ready")

    def write_config(self, yaml_text):
        with open(self.config_path, "w") as f:
            f.write(yaml_text)

    def _read_log(self):
        for line in self.proc.stdout:
            with self.log_lock:
                self.log_lines.append(line.rstrip("\n"))
            m = re.search(r"listener (\S+) on \S+ \(port (\d+)\)", line)
            if m:
                self.ports[m.group(1)] = int(m.group(2))
                if line.rstrip().endswith(", TLS"):
                    TLS_PORTS.add(int(m.group(2)))
                else:
                    TLS_PORTS.discard(int(m.group(2)))
            m = re.search(r"admin endpoint on \S+ \(port (\d+)\)", line)
            if m:
                self.admin_port = int(m.group(1))
                # Never TLS, even where the kernel handed out the port of an earlier
                # stealgate's TLS listener (Client would otherwise speak TLS to it).
                TLS_PORTS.discard(self.admin_port)

    def logs(self):
        with self.log_lock:
            return list(self.log_lines)

    def wait_for(self, cond, timeout, what):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if cond():
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise AssertionError(f"{what}: stealgate exited with {self.proc.returncode}\n" + "\n".join(self.logs()))
            time.sleep(0.02)
        raise AssertionError(f"{what}\n" + "\n".join(self.logs()))

    def io_driver(self):
        """The I/O driver the (first) process started on, from its start line."""
        started = r" started: \d+ workers on (\w+)"
        self.wait_log(started)
        return next(m.group(1) for m in (re.search(started, l) for l in self.logs()) if m)

    def wait_log(self, pattern, timeout=5):
        self.wait_for(lambda: any(re.search(pattern, l) for l in self.logs()), timeout, f"no log line /{pattern}/")

    @property
    def port(self):
        return self.ports.get("public") or next(iter(self.ports.values()))

    def rss_kib(self):
        """Resident memory of the stealgate process, KiB."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def cpu_seconds(self):
        """User + system CPU time of the stealgate process so far, from /proc (10 ms ticks)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the name: state is field 3
        return (int(fields[14 - 3]) + int(fields[15 - 3])) / os.sysconf("SC_CLK_TCK")

    def admin_get(self, path):
        return request_once(self.admin_port, "GET", path)

    def metrics(self):
        status, _, body = self.admin_get("/metrics")
        assert status == 200
        return body.decode()

    def exported_metrics(self, name):
        """The /metrics text, after checking that `name` is exported (its # TYPE line is
        present), so a renamed metric fails every check on it."""
        text = self.metrics()
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        if not re.search(rf"^# TYPE ({re.escape(name)}|{re.escape(base)}) ", text, re.M):
            raise AssertionError(f"metric {name} is not exported")
        return text

    def metric_sum(self, name):
        """The sum of every labelled series of `name` (e.g. a counter per worker)."""
        return sum(float(line.rsplit(" ", 1)[1]) for line in self.exported_metrics(name).splitlines()
                   if line.startswith(name + "{"))

    def metric(self, name, default=None, **labels):
        """Value of the series `name` with `labels`. The metric must be exported
        (exported_metrics); a missing label set raises too, unless `default` is given (for
        counters exported only once non-zero)."""
        text = self.exported_metrics(name)
        for line in text.splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            ok = all(f'{k}="{v}"' in line for k, v in labels.items())
            if ok and (line.startswith(name + "{") or not labels):
                return float(line.rsplit(" ", 1)[1])
        if default is not None:
            return float(default)
        raise AssertionError(f"no series {name}{labels} in /metrics")

    def reload(self, yaml_text=None):
        if yaml_text is not None:
            self.write_config(yaml_text)
        before = len(self.logs())
        self.proc.send_signal(signal.SIGHUP)
        self.wait_for(lambda: any(("configuration reloaded" in l or "reload rejected" in l)
                                  for l in self.logs()[before:]), 10, "no reload outcome logged")
        return any("configuration reloaded" in l for l in self.logs()[before:])

    def stop(self, sig=signal.SIGTERM, timeout=15, expect_rc=0):
        """Stops the process (if it still runs) and checks how it ended: the exit status
        must be `expect_rc` (None: any) and its output must hold no sanitizer report. Every
        test's stealgate ends here (main() stops the ones a test left running)."""
        hung = False
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout * TIMEOUT_SCALE)
            except subprocess.TimeoutExpired:
                hung = True
                self.proc.kill()
                self.proc.wait()
        self.reader.join(5)
        if self in RUNNING:
            RUNNING.remove(self)
        reports = [l for l in self.logs() if any(m in l for m in SANITIZER_MARKERS)]
        problems = []
        if hung:
            problems.append(f"did not exit within {timeout * TIMEOUT_SCALE:.0f}s of {signal.Signals(sig).name}")
        if expect_rc is not None and self.proc.returncode != expect_rc:
            problems.append(f"exited with {self.proc.returncode}, expected {expect_rc}")
        if reports:
            problems.append("sanitizer report: " + reports[0])
        if problems:
            raise AssertionError("stealgate " + "; ".join(problems) + "\n" + "\n".join(self.logs()[-60:]))
        return self.proc.returncode


# --- raw HTTP client ----------------------------------------------------------------------

class Response:
    def __init__(self, status, reason, headers, body, version):
        self.status = status
        self.reason = reason
        self.headers = headers  # list of (name, value)
        self.body = body
        self.version = version

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def header_all(self, name):
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def json(self):
        return json.loads(self.body)


class Client:
    """One TCP connection; sends raw bytes and parses responses (CL, chunked, close)."""

    def __init__(self, port, timeout=10, tls=None, server_hostname="test.local", ip="127.0.0.1", source=None,
                 preface=b""):
        """`tls`: an ssl.SSLContext to speak TLS with; by default, the test CA's for a port
        stealgate announced as a TLS listener. `ip`: the address to dial (any of 127/8 is
        loopback); `source`: the address to dial from (the kernel's choice by default);
        `preface`: bytes sent first, before any TLS (a PROXY protocol header)."""
        self.sock = socket.create_connection((ip, port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        if preface:
            self.sock.sendall(preface)
        if tls is None and port in TLS_PORTS:
            tls = tls_client_context()
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname=server_hostname)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data if isinstance(data, bytes) else data.encode("latin-1"))

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("connection closed")
        self.buf += data

    def read_to_close(self):
        """Everything buffered plus whatever arrives until the peer closes or resets."""
        out, self.buf = self.buf, b""
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                break
            if not data:
                break
            out += data
        return out

    def _until(self, marker):
        while marker not in self.buf:
            self._fill()
        i = self.buf.index(marker) + len(marker)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def _n(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_response(self, head=False):
        raw = self._until(b"\r\n\r\n").decode("latin-1")
        lines = raw.split("\r\n")
        version, status, *reason = lines[0].split(" ", 2)
        headers = []
        for line in lines[1:]:
            if line:
                k, v = line.split(":", 1)
                headers.append((k.strip(), v.strip()))
        status = int(status)
        resp = Response(status, reason[0] if reason else "", headers, b"", version)
        te = resp.header("transfer-encoding")
        if head or status in (204, 304) or 100 <= status < 200:
            return resp
        if te and "chunked" in te.lower():
            body = b""
            while True:
                size = int(self._until(b"\r\n").split(b";")[0].strip(), 16)
                if size == 0:
                    trailers = []
                    while True:
                        t = self._until(b"\r\n")
                        if t == b"\r\n":
                            break
                        k, v = t.decode().split(":", 1)
                        trailers.append((k.strip(), v.strip()))
                    resp.trailers = trailers
                    break
                body += self._n(size)
                self._n(2)
            resp.body = body
        elif resp.header("content-length") is not None:
            resp.body = self._n(int(resp.header("content-length")))
        else:
            body = self.read_to_close()
            resp.body = body
        return resp

    def request(self, method, path, headers=None, body=b"", host="test.local"):
        hdrs = [("Host", host)] + list(headers or [])
        if body and not any(k.lower() in ("content-length", "transfer-encoding") for k, _ in hdrs):
            hdrs.append(("Content-Length", str(len(body))))
        msg = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs) + "\r\n"
        self.send(msg.encode("latin-1") + (body if isinstance(body, bytes) else body.encode()))
        return self.read_response(head=(method == "HEAD"))

    def closed_by_peer(self, timeout=2):
        """True if the server closes the connection (EOF or reset) within `timeout`."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
                self.buf += data
        except (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError):
            return True
        except socket.timeout:
            return False

    def close(self):
        self.sock.close()


def listening_inodes(port, pid=None):
    """The inodes of the TCP sockets that listen on 127.0.0.1:`port` (/proc/net/tcp), only
    those process `pid` holds when given."""
    inodes = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[1] == f"0100007F:{port:04X}" and fields[3] == "0A":
                inodes.add(fields[9])
    if pid is None:
        return inodes
    held = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            held.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return {i for i in inodes if f"socket:[{i}]" in held}


def listening_sockets(port, pid=None):
    """How many TCP sockets listen on 127.0.0.1:`port`, only those of `pid` when given."""
    return len(listening_inodes(port, pid))


def request_once(port, method, path, headers=None, body=b"", host="test.local", timeout=10, tls=None):
    c = Client(port, timeout=timeout, tls=tls)
    try:
        r = c.request(method, path, (headers or []) + [("Connection", "close")], body, host)
        return r.status, r.headers, r.body
    finally:
        c.close()


def tls_public_listener():
    """The 'public' listener on port 0 over TLS, with the tests' shared server certificate."""
    import certs  # noqa: E402
    cert, key = certs.shared().server
    return (f"  - name: public\n    address: 127.0.0.1:0\n"
            f"    tls:\n      certificates: [{{ cert: {cert}, key: {key} }}]\n")


def config(listeners=None, clusters="", routes="", extra="", admin="127.0.0.1:0", logging="access_log: { enabled: true }"):
    """A test config: listeners default to one 'public' listener on port 0 (over TLS in TLS_MODE)."""
    if not listeners and TLS_MODE:
        listeners = tls_public_listener()
    listeners = listeners or "  - name: public\n    address: 127.0.0.1:0\n"
    out = f"runtime:\n  worker_threads: 2\nadmin:\n  address: {admin}\nlisteners:\n{listeners}"
    if clusters:
        out += "clusters:\n" + clusters
    out += "routes:\n" + routes
    out += "logging:\n  " + logging + "\n"
    out += extra
    return out


def main():
    """Runs the module's tests. A skipped test is a failure (nothing may be skipped
    silently: scripts/setup.sh --test installs every tool a test needs), and so is a module
    that ran no test."""
    prog = unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2, exit=False)
    result = prog.result
    leftover_ok = True
    for sg in list(RUNNING):  # a test that forgot to stop its stealgate: check it all the same
        try:
            sg.stop()
        except AssertionError as e:
            print(f"stealgate left running by a test: {e}", file=sys.stderr)
            leftover_ok = False
    not_applicable = [(t, why) for t, why in result.skipped if why.startswith(NOT_IN_THIS_BUILD)]
    skipped = [(t, why) for t, why in result.skipped if not why.startswith(NOT_IN_THIS_BUILD)]
    for test, why in not_applicable:
        line = f"{test.id()}: {why} ({os.path.basename(BIN)} from {os.path.dirname(os.path.dirname(BIN))})"
        print(f"NOT APPLICABLE: {line}", file=sys.stderr)
        if os.environ.get("STEALGATE_NOT_APPLICABLE_LOG"):
            with open(os.environ["STEALGATE_NOT_APPLICABLE_LOG"], "a") as f:
                f.write(line + "\n")
    for test, why in skipped:
        print(f"SKIPPED, counted as a failure: {test.id()}: {why}", file=sys.stderr)
    if result.testsRun == 0:
        print("no test ran", file=sys.stderr)
    sys.exit(0 if result.wasSuccessful() and not skipped and result.testsRun > 0 and leftover_ok else 1)
