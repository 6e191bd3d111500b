// Readable waits that start after a read, on both drivers: what a read left in the socket
// (bytes, or a FIN that came with the last ones) and what arrived while only a watch was
// armed must wake the next wait at once. On epoll these are the cases where a wait may not
// sleep without looking (io/reactor_fd.h: a socket counts as drained only when its last
// read said nothing, not even a FIN, was left; a watch's wake leaves the readiness to the
// reader); io_uring's receives see them by construction. Also on epoll: a socket joins the
// reactor at its first wait, and what came before that wait wakes it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "io/runtime.h"
#include "io/stream.h"
#include "io/tcp.h"
#include "../../support/io_drivers.h"
#include "../../support/io_server.h"
#include "../../support/loopback.h"
#include "../../support/workers.h"

namespace sg::io {
namespace {

using namespace std::chrono_literals;
using sg::testing::bind_loopback;
using sg::testing::connect_loopback;
using sg::testing::IdleWait;
using sg::testing::workers;

class Readiness : public ::testing::TestWithParam<IoDriverKind> {};
INSTANTIATE_TEST_SUITE_P(Drivers, Readiness, sg::testing::kDrivers, sg::testing::driver_test_name);

// A client that sends a request and half-closes at once, while the server waits to read:
// one segment, one wake-up brings both. The read takes the bytes and leaves the FIN; the
// idle wait after it must see the FIN at once (else the connection would sit in CLOSE_WAIT
// until its idle timeout).
TEST_P(Readiness, AWaitAfterAReadThatLeftAFinBehindWakesAtOnce) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  TcpListener l = bind_loopback(rt);
  int fd = connect_loopback(l.local_endpoint().port());
  ASSERT_GE(fd, 0);
  std::atomic<bool> reading{false};
  auto server = rt.spawn([&l, &reading]() -> exec::Task<std::string> {
    auto conn = co_await l.accept(Deadline::after(2s));
    if (!conn.ok()) co_return "accept failed";
    Stream s(std::move(*conn));
    char buf[64];
    reading = true;
    IoResult r = co_await s.read_some(buf, Deadline::after(2s));
    if (r.ec || r.n != 3) co_return "first read: " + std::to_string(r.n) + " " + r.ec.message();
    const auto t0 = Clock::now();
    if (!co_await IdleWait{s, Deadline::after(3s)}) co_return "the FIN did not wake the wait";
    if (Clock::now() - t0 > 1s) co_return "woke late";
    r = co_await s.read_some(buf, Deadline::after(1s));
    if (r.ec || r.n != 0) co_return "expected EOF";
    co_return "ok";
  });
  for (int i = 0; i < 200 && !reading; ++i) std::this_thread::sleep_for(5ms);
  std::this_thread::sleep_for(20ms);  // (the read is waiting)
  // MSG_MORE holds the bytes back until the shutdown: one segment carries them and the FIN.
  ASSERT_EQ(::send(fd, "GET", 3, MSG_MORE), 3);
  ASSERT_EQ(::shutdown(fd, SHUT_WR), 0);
  EXPECT_EQ(server.wait(), "ok");
  ::close(fd);
}

// While a request is served, its client is watched for a close (the second socket of an
// either-wait, as read_head watches the client while the upstream answers). A pipelined
// request that arrives then wakes the watch, which only looks; the reader's next wait must
// still find those bytes at once, although the socket's last read had drained it.
TEST_P(Readiness, BytesThatWokeAWatchAreLeftForTheReader) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  TcpListener l = bind_loopback(rt);
  const uint16_t port = l.local_endpoint().port();
  int client = connect_loopback(port);
  int silent = connect_loopback(port);  // the "upstream" that never answers
  ASSERT_GE(client, 0);
  ASSERT_GE(silent, 0);
  std::atomic<int> phase{0};
  auto server = rt.spawn([&l, &phase]() -> exec::Task<std::string> {
    auto c = co_await l.accept(Deadline::after(2s));
    auto u = co_await l.accept(Deadline::after(2s));
    if (!c.ok() || !u.ok()) co_return "accept failed";
    TcpStream& cs = *c;
    char buf[64];
    phase = 1;
    IoResult r = co_await cs.read_some(buf, Deadline::after(2s));  // the first request, whole
    if (r.ec || r.n != 1) co_return "first read";
    phase = 2;
    EitherReadable w = co_await u->wait_readable(&cs, Deadline::after(3s));
    if (w.ec || w.which != 1) co_return "the watch did not wake";
    phase = 3;
    Stream s(std::move(cs));
    const auto t0 = Clock::now();
    if (!co_await IdleWait{s, Deadline::after(3s)}) co_return "the reader's wait missed the bytes";
    if (Clock::now() - t0 > 1s) co_return "woke late";
    r = co_await s.read_some(buf, Deadline::after(1s));
    if (r.ec || std::string(buf, r.n) != "2") co_return "second read";
    co_return "ok";
  });
  for (int i = 0; i < 200 && phase.load() < 1; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(::send(client, "1", 1, 0), 1);
  for (int i = 0; i < 200 && phase.load() < 2; ++i) std::this_thread::sleep_for(5ms);
  std::this_thread::sleep_for(20ms);  // (the watch is armed)
  ASSERT_EQ(::send(client, "2", 1, 0), 1);
  EXPECT_EQ(server.wait(), "ok");
  ::close(client);
  ::close(silent);
}

// A byte that arrives after a read found the new socket empty and before its first wait:
// on epoll that wait is where the socket joins the reactor, which must report the byte
// (the registration reports what is there, and this wait does not look first: its read
// said the socket was empty).
TEST_P(Readiness, BytesThatCameBeforeTheFirstWaitWakeIt) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  TcpListener l = bind_loopback(rt);
  int client = connect_loopback(l.local_endpoint().port());
  ASSERT_GE(client, 0);
  std::atomic<int> phase{0};
  auto server = rt.spawn([&l, &phase]() -> exec::Task<std::string> {
    auto c = co_await l.accept(Deadline::after(2s));
    if (!c.ok()) co_return "accept failed";
    char buf[64];
    if (c->try_read(buf)) co_return "the socket was not empty";
    phase = 1;
    // (holds this worker until the byte is in the socket: nothing can wait on it meanwhile)
    for (int i = 0; i < 400 && phase.load() < 2; ++i) std::this_thread::sleep_for(5ms);
    const auto t0 = Clock::now();
    IoResult r = co_await c->read_some(buf, Deadline::after(3s));
    if (r.ec || r.n != 1) co_return "the first wait missed the byte: " + r.ec.message();
    if (Clock::now() - t0 > 1s) co_return "woke late";
    co_return "ok";
  });
  for (int i = 0; i < 400 && phase.load() < 1; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(::send(client, "1", 1, 0), 1);
  std::this_thread::sleep_for(20ms);  // (the byte is in the server's socket)
  phase = 2;
  EXPECT_EQ(server.wait(), "ok");
  ::close(client);
}

// epoll alone: a descriptor the reactor cannot take (epoll refuses regular files) fails the
// wait that would register it, with the reason, instead of leaving it waiting.
TEST(ReactorRegistration, AWaitThatCannotRegisterFailsWithTheReason) {
  Runtime rt(workers(1));
  const int fd = ::open("/tmp", O_TMPFILE | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  auto got = rt.spawn([fd, &rt]() -> exec::Task<std::error_code> {
    Socket s = Socket::adopt(rt.context(), fd);
    s.read_drained() = true;  // (so that the wait registers at once instead of polling)
    co_return co_await wait_ready(s, Interest::kRead, Deadline::after(2s));
  });
  EXPECT_EQ(got.wait(), std::error_code(EPERM, std::system_category()));
}

}  // namespace
}  // namespace sg::io
