// I/O on the executor, on both drivers (epoll and io_uring): an echo server proving that
// socket completions resume tasks on worker threads (never inside the driver), deadlines,
// the window update a body read pushes before it waits, connect errors, sleep,
// cancellation of a task blocked in a read, shutdown with pending I/O.
#include "io/tcp.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "exec/context.h"
#include "io/runtime.h"
#include "io/stream.h"
#include "../../support/drop_flag.h"
#include "../../support/eventually.h"
#include "../../support/io_drivers.h"
#include "../../support/io_server.h"
#include "../../support/loopback.h"
#include "../../support/workers.h"

namespace sg::io {
namespace {

using namespace std::chrono_literals;
using sg::testing::workers;
using sg::testing::connect_loopback;
using sg::testing::IdleWait;

bool on_worker() { return exec::tl_ctx.worker != nullptr && !exec::tl_ctx.in_driver; }

class Tcp : public ::testing::TestWithParam<IoDriverKind> {};
INSTANTIATE_TEST_SUITE_P(Drivers, Tcp, sg::testing::kDrivers, sg::testing::driver_test_name);

TEST_P(Tcp, EchoServerCompletionsRunOnWorkers) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  auto listener = TcpListener::bind(rt.context(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), {});
  ASSERT_TRUE(listener.ok()) << listener.error().message();
  uint16_t port = listener->local_endpoint().port();
  std::atomic<int> off_worker{0};
  std::atomic<int> resumes{0};
  auto server = rt.spawn([&, l = std::move(*listener)]() mutable -> exec::Task<void> {
    for (int c = 0; c < 3; ++c) {
      auto conn = co_await l.accept();
      if (!conn.ok()) co_return;
      if (!on_worker()) off_worker.fetch_add(1);
      exec::spawn_detached([&, s = std::move(*conn)]() mutable -> exec::Task<void> {
        char buf[256];
        for (;;) {
          IoResult r = co_await s.read_some(buf);
          resumes.fetch_add(1);
          if (!on_worker()) off_worker.fetch_add(1);
          if (r.ec || r.n == 0) co_return;
          auto ec = co_await s.write_all(std::string_view(buf, r.n));
          if (!on_worker()) off_worker.fetch_add(1);
          if (ec) co_return;
        }
      });
    }
  });
  for (int c = 0; c < 3; ++c) {
    int fd = connect_loopback(port);
    ASSERT_GE(fd, 0);
    for (int i = 0; i < 5; ++i) {
      std::string msg = "hello " + std::to_string(c) + "/" + std::to_string(i);
      ASSERT_EQ(::send(fd, msg.data(), msg.size(), 0), static_cast<ssize_t>(msg.size()));
      std::string got;
      while (got.size() < msg.size()) {
        char buf[256];
        ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        ASSERT_GT(n, 0);
        got.append(buf, static_cast<std::size_t>(n));
      }
      EXPECT_EQ(got, msg);
    }
    ::close(fd);
  }
  EXPECT_TRUE(server.wait());
  EXPECT_GE(resumes.load(), 15);
  EXPECT_EQ(off_worker.load(), 0);
}

TEST_P(Tcp, ReadDeadlineTimesOutAndSocketStaysUsable) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  auto listener = TcpListener::bind(rt.context(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), {});
  ASSERT_TRUE(listener.ok());
  uint16_t port = listener->local_endpoint().port();
  auto server = rt.spawn([l = std::move(*listener)]() mutable -> exec::Task<std::string> {
    auto conn = co_await l.accept();
    if (!conn.ok()) co_return "accept failed";
    char buf[16];
    auto t0 = Clock::now();
    IoResult r = co_await conn->read_some(buf, Deadline::after(80ms));
    auto waited = Clock::now() - t0;
    if (r.ec != std::errc::timed_out) co_return "expected timeout, got " + r.ec.message();
    if (waited < 70ms) co_return "returned too early";
    // The socket still works after a timed-out wait.
    auto ec = co_await conn->write_all("late reply");
    co_return ec ? ec.message() : "ok";
  });
  int fd = connect_loopback(port);
  ASSERT_GE(fd, 0);
  char buf[64];
  ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
  int e = errno;
  EXPECT_EQ(server.wait(), "ok");
  ASSERT_GT(n, 0) << std::strerror(e);
  EXPECT_EQ(std::string(buf, static_cast<std::size_t>(n)), "late reply");
  ::close(fd);
}

// A sender that filled our receive window waits for an update that draining the socket
// does not always send (io::push_window_update): a read of the rest of a message sends it
// before it waits; any other read leaves the kernel's delayed-ACK timing alone.
TEST_P(Tcp, AReadOfTheRestOfAMessagePushesTheWindowUpdateBeforeItWaits) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  auto listener = TcpListener::bind(rt.context(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), {});
  ASSERT_TRUE(listener.ok());
  const uint16_t port = listener->local_endpoint().port();
  auto server = rt.spawn([l = std::move(*listener)]() mutable -> exec::Task<std::string> {
    auto conn = co_await l.accept();
    if (!conn.ok()) co_return "accept failed";
    const int fd = conn->native_handle();
    char buf[16];
    sg::testing::delay_acks(fd);
    if (sg::testing::delays_acks(fd) != true) co_return "the kernel has no delayed-ACK mode to leave";
    IoResult r = co_await conn->read_some(buf, Deadline::after(20ms));
    if (r.ec != std::errc::timed_out) co_return "expected a timeout, got " + r.ec.message();
    if (sg::testing::delays_acks(fd) != true) co_return "a default read pushed the window update";
    r = co_await conn->read_some(buf, Deadline::after(20ms), ReadMode::kRestOfMessage);
    if (r.ec != std::errc::timed_out) co_return "expected a timeout, got " + r.ec.message();
    if (sg::testing::delays_acks(fd) != false) co_return "the rest-of-message read waited with the update held back";
    co_return "ok";
  });
  const int fd = connect_loopback(port);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(server.wait(), "ok");
  ::close(fd);
}

TEST_P(Tcp, AcceptedStreamsAreNonBlockingWithNodelayAndAcceptReportsThePeer) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  auto listener = TcpListener::bind(rt.context(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), {});
  ASSERT_TRUE(listener.ok());
  uint16_t port = listener->local_endpoint().port();
  struct Seen {
    int nodelay = -1;
    bool nonblocking = false;
    tcp::endpoint peer;  // as accept reported it
  };
  auto server = rt.spawn([l = std::move(*listener)]() mutable -> exec::Task<Seen> {
    Seen seen;
    auto conn = co_await l.accept({}, &seen.peer);
    if (!conn.ok()) co_return seen;
    int v = 0;
    socklen_t len = sizeof(v);
    ::getsockopt(conn->native_handle(), IPPROTO_TCP, TCP_NODELAY, &v, &len);
    seen.nodelay = v;
    seen.nonblocking = (::fcntl(conn->native_handle(), F_GETFL) & O_NONBLOCK) != 0;
    co_return seen;
  });
  int fd = connect_loopback(port);
  ASSERT_GE(fd, 0);
  const uint16_t client_port = sg::testing::local_port(fd);
  ASSERT_NE(client_port, 0);
  auto result = server.wait();
  ASSERT_TRUE(result.has_value());
  const Seen& seen = *result;
  EXPECT_NE(seen.nodelay, 0) << "TCP_NODELAY must be inherited from the listener";
  EXPECT_TRUE(seen.nonblocking);
  EXPECT_EQ(seen.peer.address().to_string(), "127.0.0.1");
  EXPECT_EQ(seen.peer.port(), client_port);
  ::close(fd);
}

// The idle wait of a keep-alive connection: false at the deadline, true once bytes arrive,
// and it consumes nothing (the read that follows gets them).
TEST_P(Tcp, AStreamsReadableWaitEndsAtItsDeadlineOrOnDataAndConsumesNothing) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  auto listener = TcpListener::bind(rt.context(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), {});
  ASSERT_TRUE(listener.ok());
  uint16_t port = listener->local_endpoint().port();
  std::atomic<bool> timed_out{false};
  auto server = rt.spawn([l = std::move(*listener), &timed_out]() mutable -> exec::Task<std::string> {
    auto conn = co_await l.accept();
    if (!conn.ok()) co_return "accept failed";
    Stream s(std::move(*conn));
    auto t0 = Clock::now();
    if (co_await IdleWait{s, Deadline::after(80ms)}) co_return "readable before any byte was sent";
    if (Clock::now() - t0 < 70ms) co_return "the deadline came early";
    timed_out = true;
    if (!co_await IdleWait{s, Deadline::after(5s)}) co_return "no wake when bytes arrived";
    char buf[16];
    IoResult r = co_await s.read_some(buf, Deadline::after(1s));
    if (r.ec) co_return "read: " + r.ec.message();
    co_return std::string(buf, r.n);
  });
  int fd = connect_loopback(port);
  ASSERT_GE(fd, 0);
  for (int i = 0; i < 500 && !timed_out; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(timed_out.load()) << server.wait().value_or("?");
  ASSERT_EQ(::send(fd, "hi", 2, 0), 2);
  EXPECT_EQ(server.wait(), "hi");
  ::close(fd);
}

TEST_P(Tcp, ConnectRefusedIsAnError) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  // Find a port nobody listens on: bind, read the port, close.
  uint16_t port;
  {
    auto l = TcpListener::bind(rt.context(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), {});
    ASSERT_TRUE(l.ok());
    port = l->local_endpoint().port();
    l->close();
  }
  auto ctx = rt.context();
  auto ec = rt.block_on([&ctx, port]() -> exec::Task<std::error_code> {
    auto s = co_await TcpStream::connect(ctx, tcp::endpoint(asio::ip::make_address("127.0.0.1"), port),
                                         Deadline::after(2s));
    co_return s.error();
  });
  EXPECT_EQ(ec, std::errc::connection_refused);
}

TEST_P(Tcp, ConnectToAListenerWithAFullBacklogTimesOutAndLeavesNoOperation) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  // A listener with a backlog of 0 that never accepts: once it holds a connection or two,
  // further SYNs are dropped, and a connect waits for its deadline.
  int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(l, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(l, 0), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const uint16_t port = ntohs(a.sin_port);
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {
    int f = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    (void)::connect(f, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    fillers.push_back(f);
  }
  std::this_thread::sleep_for(50ms);
  auto ctx = rt.context();
  auto t0 = Clock::now();
  auto ec = rt.block_on([&ctx, port]() -> exec::Task<std::error_code> {
    auto s = co_await TcpStream::connect(ctx, tcp::endpoint(asio::ip::make_address("127.0.0.1"), port),
                                         Deadline::after(150ms));
    co_return s.ok() ? std::error_code{} : s.error();
  });
  EXPECT_EQ(ec, std::errc::timed_out);
  EXPECT_GE(Clock::now() - t0, 140ms);
  if (rt.driver_kind() == IoDriverKind::kIoUring) {
    EXPECT_TRUE(sg::testing::eventually([&] {
      std::size_t n = 0;
      for (const auto& ring : rt.ring_stats()) n += ring.in_flight;
      return n == 0;
    }));
  }
  for (int f : fillers) ::close(f);
  ::close(l);
}

TEST_P(Tcp, SleepWaitsAndResumesOnAWorker) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  auto r = rt.block_on([]() -> exec::Task<bool> {
    auto t0 = Clock::now();
    co_await sleep_for(30ms);
    co_return Clock::now() - t0 >= 30ms && on_worker();
  });
  EXPECT_EQ(r, true);
}

TEST_P(Tcp, CancellingATaskBlockedInReadDropsItsFrame) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  auto listener = TcpListener::bind(rt.context(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), {});
  ASSERT_TRUE(listener.ok());
  uint16_t port = listener->local_endpoint().port();
  std::atomic<bool> reading{false}, dropped{false};
  auto h = rt.spawn([&, l = std::move(*listener)]() mutable -> exec::Task<void> {
    sg::testing::DropFlag d{&dropped};
    auto conn = co_await l.accept();
    if (!conn.ok()) co_return;
    char buf[16];
    reading.store(true);
    co_await conn->read_some(buf);  // the client never writes
  });
  int fd = connect_loopback(port);
  ASSERT_GE(fd, 0);
  while (!reading.load()) std::this_thread::sleep_for(1ms);
  h.cancel();
  EXPECT_FALSE(h.wait());
  EXPECT_TRUE(dropped.load());
  // Dropping the frame closed the server side: the client sees EOF.
  char buf[4];
  EXPECT_EQ(::recv(fd, buf, sizeof(buf), 0), 0);
  ::close(fd);
}

TEST_P(Tcp, ShutdownWithPendingIoDropsWaitingTasks) {
  std::atomic<int> dropped{0};
  int fd = -1;
  {
    SG_DRIVER_RUNTIME(rt, workers(2));
    auto listener = TcpListener::bind(rt.context(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), {});
    ASSERT_TRUE(listener.ok());
    uint16_t port = listener->local_endpoint().port();
    std::atomic<bool> reading{false};
    rt.exec().spawn_detached([&, l = std::move(*listener)]() mutable -> exec::Task<void> {
      struct D {
        std::atomic<int>* d;
        ~D() { d->fetch_add(1); }
      } d{&dropped};
      auto conn = co_await l.accept();
      if (!conn.ok()) co_return;
      reading.store(true);
      char buf[16];
      co_await conn->read_some(buf);
    });
    rt.exec().spawn_detached([&dropped]() -> exec::Task<void> {
      struct D {
        std::atomic<int>* d;
        ~D() { d->fetch_add(1); }
      } d{&dropped};
      co_await sleep_for(1h);
    });
    fd = connect_loopback(port);
    while (!reading.load()) std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(dropped.load(), 2);
  ::close(fd);
}

}  // namespace
}  // namespace sg::io

namespace sg::io {
namespace {

// Waits on every socket of `socks` at once, each with its own tag; resumes with the tag of
// the first that is ready, after cancelling the others.
struct FirstReady {
  std::vector<Socket>& socks;
  std::vector<std::unique_ptr<ReadyWait>> waits{};

  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) {
    exec::Waker w = exec::arm_wait(h);
    for (std::size_t i = 0; i < socks.size(); ++i) {
      waits.push_back(std::make_unique<ReadyWait>());
      waits.back()->start(socks[i], Interest::kRead, w.clone(), i);
    }
  }
  std::size_t await_resume() {
    const exec::WaitResult r = exec::last_wait_result();
    for (auto& w : waits) w->cancel();
    return r.value;
  }
};

TEST_P(Tcp, MoreWaitsInOneTickThanTheSubmissionQueueHoldsAllWork) {
  // 600 polls started in one task poll: the 256-slot submission queue fills and is handed
  // to the kernel in the middle; the one socket written to wins, the rest are cancelled.
  SG_DRIVER_RUNTIME(rt, workers(2));
  constexpr std::size_t kSockets = 600;
  std::vector<Socket> socks;
  std::vector<int> peers;
  for (std::size_t i = 0; i < kSockets; ++i) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    auto s = Socket::adopt(rt.context(), sv[0]);
    socks.push_back(std::move(s));
    peers.push_back(sv[1]);
  }
  std::atomic<bool> waiting{false};
  auto h = rt.spawn([&]() -> exec::Task<std::size_t> {
    FirstReady all{socks};
    waiting = true;
    co_return co_await all;
  });
  while (!waiting.load()) std::this_thread::sleep_for(1ms);
  // Before or after the polls reach the kernel: a poll on a readable socket completes at once.
  ASSERT_EQ(::send(peers[437], "z", 1, 0), 1);
  auto r = h.wait();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, 437u);
  if (rt.driver_kind() == IoDriverKind::kIoUring) {
    EXPECT_TRUE(sg::testing::eventually([&] {
      std::size_t n = 0;
      for (const auto& ring : rt.ring_stats()) n += ring.in_flight;
      return n == 0;
    }));
  }
  for (int fd : peers) ::close(fd);
}

}  // namespace
}  // namespace sg::io
