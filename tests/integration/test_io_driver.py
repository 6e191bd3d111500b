"""The I/O driver choice: runtime.io_driver (auto, io_uring, epoll) and STEALGATE_IO_DRIVER,
what is logged and exported (stealgate_executor_io_driver_info), the fallback to epoll where
the kernel refuses io_uring (a seccomp filter, as a container profile or a systemd
SystemCallFilter would: tests/integration/no_io_uring.c), and a refused explicit io_uring
stopping the start with the reason. The other integration suites run once per driver
(scripts/test.sh)."""
import ctypes
import os
import re
import subprocess
import unittest

from harness import Client, Stealgate, config, main, request_once, HERE

NO_IO_URING = os.environ.get("STEALGATE_NO_IO_URING")
UNIT = os.path.join(HERE, "..", "..", "deploy", "stealgate.service")

ROUTES = "  - name: hello\n    match: { path_prefix: / }\n    direct_response: { status: 200, body: \"hi\\n\" }\n"


def kernel_allows_io_uring():
    """io_uring_setup(4, params) as the daemon's probe does; the fd is closed again."""
    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)  # struct io_uring_params
    nr = {"x86_64": 425, "aarch64": 425}.get(os.uname().machine, 425)
    fd = libc.syscall(nr, 4, params)
    if fd < 0:
        return False
    os.close(fd)
    return True


def with_driver(setting):
    return config(routes=ROUTES).replace("runtime:\n", f"runtime:\n  io_driver: {setting}\n", 1)


class IoDriverTest(unittest.TestCase):
    def served_on(self, sg, driver):
        self.assertEqual(sg.metric("stealgate_executor_io_driver_info", driver=driver), 1)
        self.assertIn(f'stealgate_executor_io_driver_info{{driver="{driver}"}}', sg.metrics())
        self.assertEqual(len(re.findall(r"^stealgate_executor_io_driver_info\{", sg.metrics(), re.M)), 1)
        for _ in range(20):
            status, _, body = request_once(sg.port, "GET", "/")
            self.assertEqual((status, body), (200, b"hi\n"))

    def test_default_driver_is_logged_and_exported(self):
        # auto: io_uring where the kernel allows it (or what STEALGATE_IO_DRIVER says, as
        # when scripts/test.sh runs the suites on epoll).
        forced = os.environ.get("STEALGATE_IO_DRIVER")
        expected = forced if forced in ("epoll", "io_uring") else ("io_uring" if kernel_allows_io_uring() else "epoll")
        sg = Stealgate(config(routes=ROUTES))
        sg.wait_log(rf"io driver: {expected} \(")
        sg.wait_log(rf"started: 2 workers on {expected}")
        self.served_on(sg, expected)
        sg.stop()

    def test_configured_epoll(self):
        sg = Stealgate(with_driver("epoll"), env={"STEALGATE_IO_DRIVER": None})
        sg.wait_log(r"io driver: epoll \(runtime.io_driver: epoll\)")
        self.served_on(sg, "epoll")
        sg.stop()

    def test_configured_io_uring(self):
        if not kernel_allows_io_uring():
            self.skipTest("not in this build: the kernel refuses io_uring here")
        sg = Stealgate(with_driver("io_uring"), env={"STEALGATE_IO_DRIVER": None})
        sg.wait_log(r"io driver: io_uring \(runtime.io_driver: io_uring\)")
        self.served_on(sg, "io_uring")
        sg.stop()

    def test_io_uring_serves_where_only_io_uring_register_is_refused(self):
        # A worker enables its ring with io_uring_register (DEFER_TASKRUN, src/io/uring.cpp):
        # where a filter admits io_uring_setup and io_uring_enter only, the rings are made
        # without that (and without provided buffers) instead of the workers failing.
        if not kernel_allows_io_uring():
            self.skipTest("not in this build: the kernel refuses io_uring here")
        sg = Stealgate(with_driver("io_uring"), env={"STEALGATE_IO_DRIVER": None, "NO_IO_URING_SYSCALL": "register"},
                       wrapper=[NO_IO_URING])
        sg.wait_log(r"io driver: io_uring \(runtime.io_driver: io_uring\)")
        self.served_on(sg, "io_uring")
        self.assertEqual(sg.metric_sum("stealgate_executor_io_uring_receive_buffers"), 0)
        sg.stop()

    def ring_ops(self, sg):
        return sg.metric_sum("stealgate_executor_io_uring_ops_in_flight")

    def test_ring_metrics_follow_waiting_sockets(self):
        # Each waiting socket holds one receive on a ring: 20 idle keep-alive connections add
        # 20 operations in flight and no receive buffer, and closing them cancels every one
        # (nothing is left).
        if not kernel_allows_io_uring():
            self.skipTest("not in this build: the kernel refuses io_uring here")
        sg = Stealgate(with_driver("io_uring"), env={"STEALGATE_IO_DRIVER": None})
        self.assertEqual(sg.metric("stealgate_executor_io_uring_ops_in_flight", worker="0") +
                         sg.metric("stealgate_executor_io_uring_ops_in_flight", worker="1"), self.ring_ops(sg))
        base = self.ring_ops(sg)  # the listeners' accepts (and the scrape's own connection)
        clients = [Client(sg.port) for _ in range(20)]
        for c in clients:
            self.assertEqual(c.request("GET", "/").status, 200)
        sg.wait_for(lambda: self.ring_ops(sg) >= base + 20, 5, "idle connections hold no receive")
        for w in ("0", "1"):
            self.assertEqual(sg.metric("stealgate_executor_io_uring_receive_buffers_in_use", worker=w), 0)
            self.assertEqual(sg.metric("stealgate_executor_io_uring_receive_buffer_shortages_total", worker=w), 0)
            # No shortage, so each ring still has the buffers it started with.
            self.assertEqual(sg.metric("stealgate_executor_io_uring_receive_buffers", worker=w), 32)
        for c in clients:
            c.close()
        sg.wait_for(lambda: self.ring_ops(sg) <= base, 5, "closed connections left operations on the rings")
        self.assertGreaterEqual(sg.metric("stealgate_executor_io_uring_cancels_total", worker="0", **{"from": "own"}), 0)
        sg.stop()

    def test_epoll_exports_no_ring_metrics(self):
        sg = Stealgate(with_driver("epoll"), env={"STEALGATE_IO_DRIVER": None})
        self.assertNotIn("stealgate_executor_io_uring_", sg.metrics())
        sg.stop()

    def test_environment_overrides_the_file(self):
        sg = Stealgate(with_driver("io_uring"), env={"STEALGATE_IO_DRIVER": "epoll"})
        sg.wait_log(r"io driver: epoll \(STEALGATE_IO_DRIVER: epoll\)")
        self.served_on(sg, "epoll")
        sg.stop()

    def test_auto_falls_back_to_epoll_where_io_uring_is_refused(self):
        sg = Stealgate(with_driver("auto"), env={"STEALGATE_IO_DRIVER": None}, wrapper=[NO_IO_URING])
        sg.wait_log(r"io driver: epoll \(io_uring is not available: io_uring_setup failed: Operation not permitted\)")
        self.served_on(sg, "epoll")
        sg.stop()

    def test_refused_io_uring_stops_the_start_with_the_reason(self):
        sg = Stealgate(with_driver("io_uring"), env={"STEALGATE_IO_DRIVER": None}, wrapper=[NO_IO_URING],
                       wait_ready=False)
        self.assertNotEqual(sg.proc.wait(20), 0)
        sg.reader.join(5)  # all of its output, before looking for the line
        sg.wait_log(r"runtime.io_driver is io_uring, but io_uring_setup failed: Operation not permitted")
        sg.stop(expect_rc=None)

    def test_bad_environment_value_stops_the_start(self):
        sg = Stealgate(config(routes=ROUTES), env={"STEALGATE_IO_DRIVER": "kqueue"}, wait_ready=False)
        self.assertNotEqual(sg.proc.wait(20), 0)
        sg.reader.join(5)  # all of its output, before looking for the line
        sg.wait_log(r'STEALGATE_IO_DRIVER is "kqueue"; expected auto, io_uring or epoll')
        sg.stop(expect_rc=None)

    def test_bad_config_value_names_the_field(self):
        sg = Stealgate(with_driver("kqueue"), wait_ready=False)
        self.assertNotEqual(sg.proc.wait(20), 0)
        sg.reader.join(5)  # all of its output, before looking for the line
        sg.wait_log(r"stealgate.yaml:2:\d+: runtime.io_driver: .*kqueue")
        sg.stop(expect_rc=None)

    def test_the_unit_allows_io_uring(self):
        # The service's system-call filter admits io_uring (the groups as systemd expands
        # them), so the packaged daemon runs on it where the kernel allows it.
        allowed = set()
        with open(UNIT) as f:
            for line in f:
                if not line.startswith("SystemCallFilter="):
                    continue
                for item in line.split("=", 1)[1].split():
                    if item.startswith("@"):
                        out = subprocess.run(["systemd-analyze", "syscall-filter", item], check=True,
                                             capture_output=True, text=True).stdout
                        allowed.update(w.strip() for w in out.splitlines() if w.startswith("    ") and "@" not in w)
                    else:
                        allowed.add(item)
        for call in ("io_uring_setup", "io_uring_enter", "io_uring_register"):
            self.assertIn(call, allowed)


if __name__ == "__main__":
    main()
