// One listening socket accepted from by a task per worker (TcpListener::share), on both
// drivers: a worker busy with one long computation (a TLS handshake) must not hold back
// the connections that arrive meanwhile while another worker waits for them. On io_uring
// that is why a shared listener takes single-shot accepts: a multishot accept's wait on
// the socket is exclusive and claims every wake-up, so the ring that armed first would
// take every connection, busy or not (io/uring.h, "Accepts").
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <vector>

#include "io/runtime.h"
#include "io/tcp.h"
#include "../../support/eventually.h"
#include "../../support/io_drivers.h"
#include "../../support/loopback.h"
#include "../../support/workers.h"

namespace sg::io {
namespace {

using namespace std::chrono_literals;
using sg::testing::connect_loopback;
using sg::testing::eventually;
using sg::testing::uses_io_uring;
using sg::testing::workers;

class SharedAccept : public ::testing::TestWithParam<IoDriverKind> {};
INSTANTIATE_TEST_SUITE_P(Drivers, SharedAccept, sg::testing::kDrivers, sg::testing::driver_test_name);

// Takes connections from `l` until dropped, counting them (and keeping them open).
exec::Task<void> accept_counting(TcpListener& l, std::atomic<int>& taken, std::vector<TcpStream>& kept) {
  for (;;) {
    auto c = co_await l.accept();
    if (!c.ok()) continue;
    kept.push_back(std::move(*c));
    taken.fetch_add(1);
  }
}

TEST_P(SharedAccept, ABusyWorkerDoesNotHoldBackConnectionsAnotherWaitsFor) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  auto bound = TcpListener::bind(rt.context(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), {});
  ASSERT_TRUE(bound.ok());
  TcpListener& first = *bound;
  auto copy = first.share();
  ASSERT_TRUE(copy.ok());
  TcpListener& second = *copy;
  ASSERT_NE(first.native_handle(), second.native_handle());
  EXPECT_EQ(first.local_endpoint(), second.local_endpoint());
  const exec::Handle h = rt.handle();

  // Worker 0 waits first (on io_uring its accept is in the kernel's wait queue ahead of
  // worker 1's), then becomes busy.
  std::atomic<int> taken0{0}, taken1{0};
  std::vector<TcpStream> kept0, kept1;
  auto loop0 = h.spawn_pinned(0, accept_counting(first, taken0, kept0));
  if (uses_io_uring(rt)) {
    ASSERT_TRUE(eventually([&] { return sg::testing::ring_ops_in_flight(rt, 0) == 1; }, 5s));
  }
  std::atomic<bool> spinning{false}, release{false};
  auto busy = h.spawn_pinned(0, [&]() -> exec::Task<void> {
    spinning = true;
    while (!release.load()) {
    }
    co_return;
  });
  ASSERT_TRUE(eventually([&] { return spinning.load(); }, 5s));
  auto loop1 = h.spawn_pinned(1, accept_counting(second, taken1, kept1));
  if (uses_io_uring(rt)) {
    ASSERT_TRUE(eventually([&] { return sg::testing::ring_ops_in_flight(rt, 1) == 1; }, 5s));
  }

  constexpr int kClients = 4;
  std::vector<int> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(connect_loopback(first.local_endpoint().port()));
  // On io_uring the first connection's wake-up went to worker 0's armed accept, which its
  // worker reaps once free; worker 1 takes every other one (a woken accept takes the
  // oldest connection queued, so which ones those are does not matter).
  const int at_least = uses_io_uring(rt) ? kClients - 1 : kClients;
  EXPECT_TRUE(eventually([&] { return taken1.load() >= at_least; }, 5s))
      << "worker 1 took " << taken1.load() << " of " << kClients << " while worker 0 was busy";
  EXPECT_EQ(taken0.load(), 0);
  release = true;
  EXPECT_TRUE(busy.wait());
  EXPECT_TRUE(eventually([&] { return taken0.load() + taken1.load() == kClients; }, 5s));

  loop0.cancel();
  loop1.cancel();
  loop0.wait();
  loop1.wait();
  // Stopping each listener leaves nothing taken behind and no operation on the rings.
  for (TcpListener* l : {&first, &second}) {
    auto rest = h.spawn([l]() -> exec::Task<std::size_t> { co_return (co_await l->stop_accepting()).size(); });
    auto n = rest.wait();
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(*n, 0u);
  }
  EXPECT_TRUE(eventually([&] { return sg::testing::ring_ops_in_flight(rt) == 0; }, 5s));
  kept0.clear();
  kept1.clear();
  for (int fd : clients) ::close(fd);
}

// A shared listener's connection comes with its peer's address: on io_uring the one the
// single-shot accept reported (no getpeername), on epoll accept4's.
TEST_P(SharedAccept, EachConnectionComesWithItsPeersAddress) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  auto bound = TcpListener::bind(rt.context(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), {});
  ASSERT_TRUE(bound.ok());
  auto copy = bound->share();
  ASSERT_TRUE(copy.ok());
  TcpListener* listeners[] = {&*bound, &*copy};
  const exec::Handle h = rt.handle();
  for (std::size_t i = 0; i < 4; ++i) {
    // The accept waits before the client connects: on io_uring it is the ring's accept
    // that takes the connection (a connection already queued goes to accept4).
    const std::size_t worker = i % 2;
    TcpListener& l = *listeners[worker];
    auto accepted = h.spawn_pinned(worker, [&l]() -> exec::Task<tcp::endpoint> {
      tcp::endpoint peer;
      auto c = co_await l.accept({}, &peer);
      EXPECT_TRUE(c.ok());
      co_return peer;
    });
    if (uses_io_uring(rt)) {
      ASSERT_TRUE(eventually([&] { return sg::testing::ring_ops_in_flight(rt, worker) == 1; }, 5s));
    }
    const int client = connect_loopback(bound->local_endpoint().port());
    ASSERT_GE(client, 0);
    const uint16_t port = sg::testing::local_port(client);
    ASSERT_NE(port, 0);
    auto peer = accepted.wait();
    ASSERT_TRUE(peer.has_value());
    EXPECT_EQ(peer->port(), port) << "connection " << i;
    EXPECT_EQ(peer->address().to_string(), "127.0.0.1");
    ::close(client);
  }
  for (TcpListener* l : listeners) {
    auto rest = h.spawn([l]() -> exec::Task<std::size_t> { co_return (co_await l->stop_accepting()).size(); });
    EXPECT_EQ(rest.wait(), std::optional<std::size_t>(0));
  }
  EXPECT_TRUE(eventually([&] { return sg::testing::ring_ops_in_flight(rt) == 0; }, 5s));
}

}  // namespace
}  // namespace sg::io
