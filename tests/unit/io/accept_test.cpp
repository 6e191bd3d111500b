// A listener's accepts, on both drivers. On io_uring they are one multishot accept that
// the listener keeps (io/uring.h): the ring takes every connection as it comes, so these
// tests check that no connection it took is ever lost: a task dropped while it waits
// leaves them for the next accept, stop_accepting() yields them (a stopping listener
// serves them), closing the listener closes them and leaves no operation,
// wait_acceptable() (backlog mode) stops the ring from taking more, and so does a queue
// of connections the listener does not take. On epoll the same calls leave connections
// in the kernel's backlog, which the tests check too.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "io/runtime.h"
#include "io/tcp.h"
#include "io/uring.h"
#include "../../support/eventually.h"
#include "../../support/io_drivers.h"
#include "../../support/io_server.h"
#include "../../support/loopback.h"
#include "../../support/workers.h"

namespace sg::io {
namespace {

using namespace std::chrono_literals;
using sg::testing::bind_loopback;
using sg::testing::uses_io_uring;
using sg::testing::ring_ops_in_flight;
using sg::testing::workers;
using sg::testing::connect_loopback;
using sg::testing::eventually;

class Accept : public ::testing::TestWithParam<IoDriverKind> {};
INSTANTIATE_TEST_SUITE_P(Drivers, Accept, sg::testing::kDrivers, sg::testing::driver_test_name);

// Connections waiting in the listening socket's accept queue (the kernel's backlog): for
// a listening socket, TCP_INFO reports its length as tcpi_unacked.
unsigned backlog_of(int listen_fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (::getsockopt(listen_fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return ~0u;
  return info.tcpi_unacked;
}

// Accepts one connection on `l` and closes it, from a task that first waits with nobody
// connecting (on io_uring, a wait that starts the ring's multishot accept, which stays
// armed after the task ends; an accept that finds a connection queued takes it with
// accept4 and starts nothing).
void accept_one(Runtime& rt, TcpListener& l) {
  std::atomic<bool> waited{false};
  auto h = rt.spawn([&]() -> exec::Task<bool> {
    auto none = co_await l.accept(Deadline::after(2ms));
    waited = true;
    if (none.ok() || none.error() != std::errc::timed_out) co_return false;
    auto c = co_await l.accept(Deadline::after(5s));
    co_return c.ok();
  });
  ASSERT_TRUE(eventually([&] { return waited.load(); }));
  int fd = connect_loopback(l.local_endpoint().port());
  ASSERT_GE(fd, 0);
  auto ok = h.wait();
  ASSERT_TRUE(ok.has_value() && *ok);
  ::close(fd);
}

// Arms the listener (accept_one), then connects `n` clients while nobody accepts: on
// io_uring the ring takes them (the kernel's backlog empties), on epoll they stay in the
// backlog. Returns the clients' descriptors.
std::vector<int> connect_while_armed(Runtime& rt, TcpListener& l, unsigned n) {
  accept_one(rt, l);
  std::vector<int> clients;
  for (unsigned i = 0; i < n; ++i) clients.push_back(connect_loopback(l.local_endpoint().port()));
  const unsigned expect_backlog = uses_io_uring(rt) ? 0 : n;
  EXPECT_TRUE(eventually([&] { return backlog_of(l.native_handle()) == expect_backlog; }, 5s))
      << "backlog " << backlog_of(l.native_handle());
  return clients;
}

// The server end answers: the connection is alive, not closed by whoever held it.
void expect_alive(TcpStream& s, int client) {
  ASSERT_EQ(::send(s.native_handle(), "k", 1, MSG_NOSIGNAL), 1);
  char c = 0;
  EXPECT_EQ(::recv(client, &c, 1, 0), 1);
  EXPECT_EQ(c, 'k');
}

TEST_P(Accept, ConnectionsTheRingTookAreYieldedWhenTheListenerStops) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  TcpListener l = bind_loopback(rt);
  std::vector<int> clients = connect_while_armed(rt, l, 5);
  auto h = rt.spawn([&l]() -> exec::Task<std::vector<TcpListener::TakenConnection>> {
    co_return co_await l.stop_accepting();
  });
  auto taken = h.wait();
  ASSERT_TRUE(taken.has_value());
  ASSERT_EQ(taken->size(), uses_io_uring(rt) ? 5u : 0u);
  for (std::size_t i = 0; i < taken->size(); ++i) {
    // In the order the kernel completed them, each with its peer's address.
    EXPECT_EQ((*taken)[i].peer.port(), sg::testing::local_port(clients[i]));
    EXPECT_EQ((*taken)[i].peer.address().to_string(), "127.0.0.1");
    expect_alive((*taken)[i].stream, clients[i]);
  }
  // Stopped: the ring takes no more, and no operation is left on it.
  EXPECT_TRUE(eventually([&] { return ring_ops_in_flight(rt) == 0; }, 5s));
  int late = connect_loopback(l.local_endpoint().port());
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(backlog_of(l.native_handle()), uses_io_uring(rt) ? 1u : 6u);
  ::close(late);
  for (int fd : clients) ::close(fd);
}

TEST_P(Accept, ATaskDroppedWhileAcceptingLosesNoConnection) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  TcpListener l = bind_loopback(rt);
  std::atomic<bool> waiting{false};
  auto dropped = rt.spawn([&]() -> exec::Task<void> {
    waiting = true;
    co_await l.accept();
  });
  ASSERT_TRUE(eventually([&] { return waiting.load(); }));
  std::this_thread::sleep_for(20ms);  // inside its wait
  dropped.cancel();
  EXPECT_FALSE(dropped.wait());
  // The ring (io_uring) takes this connection while nobody waits: the next accept gets it.
  int client = connect_loopback(l.local_endpoint().port());
  ASSERT_GE(client, 0);
  if (uses_io_uring(rt)) {
    EXPECT_TRUE(eventually([&] { return backlog_of(l.native_handle()) == 0; }, 5s));
  }
  auto next = rt.spawn([&]() -> exec::Task<std::optional<TcpStream>> {
    auto c = co_await l.accept(Deadline::after(5s));
    if (!c.ok()) co_return std::nullopt;
    co_return std::move(*c);
  });
  auto got = next.wait();
  ASSERT_TRUE(got.has_value() && got->has_value());
  expect_alive(**got, client);
  ::close(client);
}

TEST_P(Accept, ATimedOutAcceptLeavesTheListenerAccepting) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  TcpListener l = bind_loopback(rt);
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    auto first = co_await l.accept(Deadline::after(20ms));
    if (first.ok() || first.error() != std::errc::timed_out) co_return "expected a timeout";
    auto second = co_await l.accept(Deadline::after(5s));
    if (!second.ok()) co_return "second accept: " + second.error().message();
    co_return "";
  });
  std::this_thread::sleep_for(60ms);
  int client = connect_loopback(l.local_endpoint().port());
  ASSERT_GE(client, 0);
  auto r = h.wait();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, "");
  ::close(client);
}

TEST_P(Accept, ClosingTheListenerClosesWhatTheRingTookAndLeavesNoOperation) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  std::optional<TcpListener> l(bind_loopback(rt));
  std::vector<int> clients = connect_while_armed(rt, *l, 3);
  l.reset();  // from this thread, off the workers: the cancel and close go through the ring
  for (int fd : clients) {
    char c;
    const ssize_t n = ::recv(fd, &c, 1, 0);
    EXPECT_TRUE(n == 0 || (n < 0 && errno == ECONNRESET)) << "client not closed: " << n;
    ::close(fd);
  }
  EXPECT_TRUE(eventually([&] { return ring_ops_in_flight(rt) == 0; }, 5s));
}

// Backlog mode (a listener at its connection limit must leave connections in the kernel):
// wait_acceptable() stops a multishot accept that accept() started; try_accept() still
// yields what it took, and then takes connections from the kernel one at a time.
TEST_P(Accept, WaitAcceptableStopsTheRingTakingConnections) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  TcpListener l = bind_loopback(rt);
  std::vector<int> clients = connect_while_armed(rt, l, 2);
  // Takes `n` connections the way backlog mode does.
  auto take = [&](int n) {
    return rt.spawn([&l, n]() -> exec::Task<int> {
      int got = 0;
      while (got < n) {
        if (co_await l.wait_acceptable(Deadline::after(5s))) co_return got;
        auto one = l.try_accept();
        if (!one.ok()) co_return got;
        if (one->has_value()) ++got;
      }
      co_return got;
    }).wait();
  };
  auto two = take(2);
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(*two, 2);
  // The ring no longer takes connections: a new one waits in the kernel until taken.
  EXPECT_TRUE(eventually([&] { return ring_ops_in_flight(rt) == 0; }, 5s));
  clients.push_back(connect_loopback(l.local_endpoint().port()));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(backlog_of(l.native_handle()), 1u);
  auto one = take(1);
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(*one, 1);
  EXPECT_EQ(backlog_of(l.native_handle()), 0u);
  for (int fd : clients) ::close(fd);
}

// A listener that does not keep up: once kMaxAcceptsQueued connections wait untaken, the
// ring stops taking them (those the kernel completed before its cancel still arrive) and
// leaves the rest in the kernel's (bounded) backlog; the listener then takes them all.
TEST_P(Accept, TheRingStopsTakingConnectionsTheListenerDoesNotTake) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  TcpListener l = bind_loopback(rt);
  accept_one(rt, l);
  constexpr unsigned kFirst = UringDriver::kMaxAcceptsQueued + 40;
  constexpr unsigned kLater = 10;
  std::vector<int> clients;
  for (unsigned i = 0; i < kFirst; ++i) clients.push_back(connect_loopback(l.local_endpoint().port()));
  // io_uring: the ring has stopped (no operation in flight) with at least its bound taken.
  EXPECT_TRUE(eventually([&] { return ring_ops_in_flight(rt) == 0; }, 5s));
  const unsigned taken_by_ring = kFirst - backlog_of(l.native_handle());
  if (uses_io_uring(rt)) {
    EXPECT_GE(taken_by_ring, UringDriver::kMaxAcceptsQueued);
  } else {
    EXPECT_EQ(taken_by_ring, 0u);
  }
  for (unsigned i = 0; i < kLater; ++i) clients.push_back(connect_loopback(l.local_endpoint().port()));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(backlog_of(l.native_handle()), kFirst + kLater - taken_by_ring);
  auto h = rt.spawn([&l]() -> exec::Task<unsigned> {
    unsigned got = 0;
    while (true) {
      auto c = co_await l.accept(Deadline::after(200ms));
      if (!c.ok()) co_return got;
      ++got;
    }
  });
  auto got = h.wait();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, kFirst + kLater);
  EXPECT_EQ(backlog_of(l.native_handle()), 0u);
  for (int fd : clients) ::close(fd);
}

}  // namespace
}  // namespace sg::io
