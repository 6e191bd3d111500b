"""Binary upgrade by signal (SIGUSR2): stealgate starts a new copy of its binary, hands it
every listening socket, and drains only once the new process serves. Under load (a new
connection per request, keep-alive clients, a slow request in flight) no request is lost
and no connection refused; a new config or binary that cannot start leaves the old
process serving."""
import ctypes
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import temp_dir, BIN, SANITIZER_MARKERS, TIMEOUT_SCALE, TLS_MODE, Client, Stealgate, Upstream, config, listening_inodes, main, request_once, tls_client_context, tls_public_listener  # noqa: E402

# The new process outlives the old one, its parent: as a subreaper this test process
# inherits it, so its exit status can be checked like any child's.
PR_SET_CHILD_SUBREAPER = 36
ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def upgrade_config(up, listeners=None):
    return config(listeners=listeners, clusters=f"  - name: app\n    endpoints: [{up.address}]\n",
                  routes="  - name: hello\n    match: { path: / }\n    direct_response: { status: 200, body: hi }\n"
                         "  - name: app\n    match: { path_prefix: /slow }\n    cluster: app\n    timeout: 10s\n",
                  logging="access_log: { enabled: false }", extra="drain_timeout: 30s\n")


class Load:
    """Clients that count outcomes: new connection per request, and keep-alive clients.
    A keep-alive client whose idle connection the old process closed before answering
    (drain closes idle connections) retries its GET on a new one, as RFC 9112 9.3.1 lets a
    client do for an idempotent request; that is counted, not lost."""

    def __init__(self, port):
        self.port = port
        self.counts = {"ok": 0, "refused": 0, "error": 0, "retried": 0}
        self.errors = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.fresh, daemon=True) for _ in range(2)]
        self.threads += [threading.Thread(target=self.keepalive, daemon=True) for _ in range(2)]
        for t in self.threads:
            t.start()

    def count(self, key, why=None):
        with self.lock:
            self.counts[key] += 1
            if why is not None:
                self.errors.append(repr(why))

    def fresh(self):
        while not self.stop.is_set():
            try:
                status, _, _ = request_once(self.port, "GET", "/", timeout=10 * TIMEOUT_SCALE)
                self.count("ok" if status == 200 else "error")
            except ConnectionRefusedError:
                self.count("refused")
            except (OSError, EOFError, AssertionError, ValueError) as e:
                self.count("error", e)

    def keepalive(self):
        c = None
        while not self.stop.is_set():
            try:
                if c is None:
                    c = Client(self.port, timeout=10 * TIMEOUT_SCALE)
                    reused = False
                c.send(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
                r = c.read_response()
                self.count("ok" if r.status == 200 else "error")
                if (r.header("connection") or "").lower() == "close":
                    c.close()
                    c = None
                else:
                    reused = True
            except ConnectionRefusedError:
                self.count("refused")
                c = None
            except (OSError, EOFError, AssertionError, ValueError) as e:
                if c is not None and reused and not c.buf and isinstance(e, (EOFError, ConnectionResetError)):
                    self.count("retried")  # closed while idle: retry on a new connection
                else:
                    self.count("error", e)
                if c is not None:
                    c.close()
                c = None

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(15 * TIMEOUT_SCALE)


def until(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(what)
        time.sleep(0.01)


def new_pid(sg):
    m = None
    for line in sg.logs():
        m = re.search(r"binary upgrade: new process (\d+) is serving", line) or m
    return int(m.group(1)) if m else None


def kill_if_alive(pid):
    """Cleanup for a test that failed before stopping the new process: kill and reap it."""
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def stop_successor(pid):
    os.kill(pid, signal.SIGTERM)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


class BinaryUpgradeTest(unittest.TestCase):
    def setUp(self):
        self.up = Upstream("upg")
        self.addCleanup(self.up.stop)

    def upgrade(self, sg):
        """Signals a binary upgrade and waits until the new process serves; returns its pid
        (killed at cleanup if the test ends before stopping it)."""
        sg.proc.send_signal(signal.SIGUSR2)
        sg.wait_log(r"binary upgrade: new process \d+ is serving", 10 * TIMEOUT_SCALE)
        pid = new_pid(sg)
        self.addCleanup(kill_if_alive, pid)
        return pid

    def test_upgrade_under_load_loses_no_request_and_refuses_no_connection(self):
        sg = Stealgate(upgrade_config(self.up))
        port, admin = sg.port, sg.admin_port
        load = Load(port)
        sg.wait_for(lambda: load.counts["ok"] >= 100, 5 * TIMEOUT_SCALE, "the load did not start")
        slow = Client(port, timeout=10 * TIMEOUT_SCALE)
        slow.send(b"GET /slow?ms=1000&id=inflight HTTP/1.1\r\nHost: h\r\n\r\n")
        sg.wait_for(lambda: any(e["target"].endswith("id=inflight") for e in self.up.log()), 5, "slow request not in flight")
        pid = self.upgrade(sg)
        self.assertNotEqual(pid, sg.proc.pid)
        # While the old process drains, the admin socket is the new one's alone: a health
        # check never meets the old one's "503 draining", nor a scrape its counters.
        readiness = [request_once(admin, "GET", "/ready")[0] for _ in range(20)]
        self.assertEqual(readiness, [200] * 20, "the draining old process answered on the admin socket")
        # The old process drains (the slow request finishes on it) and exits cleanly.
        self.assertEqual(slow.read_response().status, 200, "the in-flight request was cut")
        slow.close()
        sg.stop(timeout=30 * TIMEOUT_SCALE)
        served = load.counts["ok"]
        until(lambda: load.counts["ok"] >= served + 100, 5 * TIMEOUT_SCALE, "the new process serves nothing")
        self.assertEqual(request_once(admin, "GET", "/ready")[0], 200, "the admin endpoint moved over too")
        # Every socket handed over once: a plain listener's socket per worker (`reuse_port:
        # auto`), a TLS listener's one socket (on io_uring its workers share it).
        shared = ", accepting on 2 workers" if sg.io_driver() == "io_uring" else ""
        sockets = shared if TLS_MODE else r", 2 sockets \(reuse_port\)"
        sg.wait_log(r"listener public on \S+ \(port \d+\) on an inherited socket" + sockets +
                    (", TLS" if TLS_MODE else "") + "$")
        self.assertFalse([l for l in sg.logs() if "matches no listener" in l])
        self.assertEqual(len(listening_inodes(port, pid)), 1 if TLS_MODE else 2)
        load.finish()
        print(f"binary upgrade under load: {load.counts}", file=sys.stderr)
        self.assertEqual(load.counts["refused"], 0, load.counts)
        self.assertEqual(load.counts["error"], 0, f"{load.counts} {load.errors[:5]}")
        self.assertEqual(stop_successor(pid), 0)
        # Its output shares the old process's pipe: read to the end, then look for reports.
        sg.reader.join(10)
        out = "\n".join(sg.logs())
        self.assertEqual(sum(l.endswith(" stopped") for l in sg.logs()), 2, "both processes logged their clean stop")
        self.assertFalse([m for m in SANITIZER_MARKERS if m in out], out[-3000:])

    def test_upgrade_hands_over_every_socket_of_a_reuse_port_listener(self):
        sg = Stealgate(upgrade_config(self.up, "  - name: public\n    address: 127.0.0.1:0\n    reuse_port: true\n"))
        port = sg.port
        handed = listening_inodes(port, sg.proc.pid)
        self.assertEqual(len(handed), 2)
        load = Load(port)
        sg.wait_for(lambda: load.counts["ok"] >= 100, 5 * TIMEOUT_SCALE, "the load did not start")
        pid = self.upgrade(sg)
        sg.stop(timeout=30 * TIMEOUT_SCALE)
        # The new process holds the very sockets the old one had (a connection queued on
        # either must reach it), and bound none beside them.
        sg.wait_log(r"listener public on \S+ \(port \d+\) on an inherited socket, 2 sockets \(reuse_port\)")
        self.assertEqual(listening_inodes(port), handed)
        self.assertEqual(listening_inodes(port, pid), handed)
        served = load.counts["ok"]
        until(lambda: load.counts["ok"] >= served + 100, 5 * TIMEOUT_SCALE, "the new process serves nothing")
        load.finish()
        self.assertEqual(load.counts["refused"], 0, load.counts)
        self.assertEqual(load.counts["error"], 0, f"{load.counts} {load.errors[:5]}")
        self.assertEqual(stop_successor(pid), 0)

    def test_upgrade_keeps_every_handed_over_socket_whatever_reuse_port_says_now(self):
        # Each socket of the group may hold queued connections: a new config that asks for
        # one socket still serves on all of them (closing one would reset what it queued).
        group = "  - name: public\n    address: 127.0.0.1:0\n"
        sg = Stealgate(upgrade_config(self.up, group))
        port = sg.port
        handed = listening_inodes(port, sg.proc.pid)
        self.assertEqual(len(handed), 2)
        sg.write_config(upgrade_config(self.up, group + "    reuse_port: false\n"))
        pid = self.upgrade(sg)
        sg.stop(timeout=30 * TIMEOUT_SCALE)
        sg.wait_log(r"listener public on \S+ \(port \d+\) on an inherited socket, 2 sockets \(reuse_port\)")
        self.assertFalse([l for l in sg.logs() if "matches no listener" in l])
        self.assertEqual(listening_inodes(port, pid), handed)
        for _ in range(20):
            self.assertEqual(request_once(port, "GET", "/")[0], 200)
        self.assertEqual(stop_successor(pid), 0)

    def test_upgrade_hands_over_a_tls_listeners_shared_socket_once(self):
        # On io_uring every worker accepts from a TLS listener's one socket, each through a
        # copy of its descriptor: the copies are not sockets to hand over.
        sg = Stealgate(upgrade_config(self.up, tls_public_listener()))
        shared = ", accepting on 2 workers" if sg.io_driver() == "io_uring" else ""
        sg.wait_log(r"listener public on \S+ \(port \d+\)" + shared + ", TLS$")
        port = sg.port
        self.assertEqual(request_once(port, "GET", "/", tls=tls_client_context())[0], 200)
        pid = self.upgrade(sg)
        sg.stop(timeout=30 * TIMEOUT_SCALE)
        sg.wait_log(r"listener public on \S+ \(port \d+\) on an inherited socket" + shared + ", TLS$")
        self.assertFalse([l for l in sg.logs() if "matches no listener" in l])
        self.assertEqual(len(listening_inodes(port, pid)), 1)
        for _ in range(20):  # new connections, whichever worker takes them
            self.assertEqual(request_once(port, "GET", "/", tls=tls_client_context())[0], 200)
        self.assertEqual(stop_successor(pid), 0)

    def test_new_config_that_does_not_load_keeps_the_old_process_serving(self):
        sg = Stealgate(upgrade_config(self.up))
        with open(sg.config_path) as f:
            good = f.read()
        sg.write_config(good + "bogus_key: 1\n")
        sg.proc.send_signal(signal.SIGUSR2)
        sg.wait_log(r"binary upgrade failed: the new process exited with status 1; this process keeps serving",
                    10 * TIMEOUT_SCALE)
        self.assertIsNone(sg.proc.poll())
        self.assertEqual(request_once(sg.port, "GET", "/")[0], 200)
        sg.write_config(good)
        sg.stop()

    def test_replaced_binary_that_fails_keeps_the_old_process_serving(self):
        # The upgrade runs the file now at the path the process was started from: replace
        # it (as a package manager does, by renaming over it) with one that cannot serve.
        d = temp_dir()
        path = os.path.join(d, "stealgate")
        shutil.copy(BIN, path)
        sg = Stealgate(upgrade_config(self.up), binary=path)
        broken = os.path.join(d, "broken")
        with open(broken, "w") as f:
            f.write("#!/bin/sh\nexit 3\n")
        os.chmod(broken, 0o755)
        os.rename(broken, path)
        sg.proc.send_signal(signal.SIGUSR2)
        sg.wait_log(r"binary upgrade failed: the new process exited with status 3; this process keeps serving",
                    10 * TIMEOUT_SCALE)
        self.assertEqual(request_once(sg.port, "GET", "/")[0], 200)
        sg.stop()


if __name__ == "__main__":
    main()
