// A listener's accepts racing deadlines, steals, drops and stops, on both drivers (run
// under ThreadSanitizer in the test command). Client threads connect over and over, each
// connection waiting for the server's one byte. On the server an accepting task waits
// with deadlines of up to 1.5 ms (a third of them already due) and yields now and then so
// that thieves take it (on io_uring its multishot accept then completes on another
// worker's ring), while the test thread drops it mid-wait, stops the listener's accepts
// (serving what they took) and starts a new accepting task, again and again. Every
// connection must be answered: none that the ring took is lost or answered twice, and
// afterwards no operation is left. The same again with two listeners sharing one socket
// (TcpListener::share: single-shot accepts on io_uring), an accepting task on each. And a
// binary upgrade's hand-over: two runtimes accepting on one socket, the old one stopping
// while a connection arrives.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "exec/scheduler.h"
#include "io/runtime.h"
#include "io/tcp.h"
#include "../support/eventually.h"
#include "../support/io_drivers.h"
#include "../support/loopback.h"
#include "../support/workers.h"

namespace sg::io {
namespace {

using namespace std::chrono_literals;

class AcceptStress : public ::testing::TestWithParam<IoDriverKind> {};
INSTANTIATE_TEST_SUITE_P(Drivers, AcceptStress, sg::testing::kDrivers, sg::testing::driver_test_name);

// Answers a taken connection with its one byte (a loopback send of a byte never blocks).
// Through syscall(2), not libc's send: ThreadSanitizer follows a descriptor through the
// calls it intercepts and cannot see a ring close one and accept another into the same
// number, so a send on a number that an accept4 on another thread returned earlier looks
// to it like a race with that accept4 (it reported one here). The kernel orders them.
void answer(TcpStream& s, std::atomic<long>& answered) {
  if (::syscall(SYS_sendto, s.native_handle(), "k", 1, MSG_NOSIGNAL, nullptr, 0) == 1) answered.fetch_add(1);
}

exec::Task<void> accept_forever(TcpListener& l, std::atomic<long>& answered, std::atomic<long>& timeouts,
                                unsigned seed) {
  std::mt19937 rng(seed);
  for (;;) {
    // A third of the waits with a deadline already due (it races the wake of a connection
    // the ring just took), the rest up to 1.5 ms.
    const auto wait = std::chrono::microseconds(rng() % 3 == 0 ? 0 : rng() % 1500);
    auto c = co_await l.accept(Deadline::after(wait));
    if (!c.ok()) {
      if (c.error() == std::errc::timed_out) timeouts.fetch_add(1);
      continue;
    }
    answer(*c, answered);
    if (rng() % 4 == 0) co_await exec::yield_now();  // give thieves something to steal
  }
}

// `copies` listeners on one socket (1: the socket's own alone), an accepting task on each.
void stress_accepts(Runtime& rt, int copies) {
  auto bound = TcpListener::bind(rt.context(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), {});
  ASSERT_TRUE(bound.ok());
  std::vector<TcpListener> listeners;
  listeners.push_back(std::move(*bound));
  while (static_cast<int>(listeners.size()) < copies) {
    auto copy = listeners.front().share();
    ASSERT_TRUE(copy.ok());
    listeners.push_back(std::move(*copy));
  }
  const uint16_t port = listeners.front().local_endpoint().port();
  constexpr int kClients = 3;
  constexpr int kEach = 300;
  std::atomic<long> answered{0}, timeouts{0}, client_ok{0}, client_bad{0};
  std::atomic<int> clients_left{kClients};
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t) {
    clients.emplace_back([&, t] {
      std::mt19937 pace(static_cast<unsigned>(t));
      for (int i = 0; i < kEach; ++i) {
        // Mostly back to back, now and then a pause that outlasts the server's deadlines.
        std::this_thread::sleep_for(std::chrono::microseconds(i % 25 == 0 ? 4000 : pace() % 400));
        int fd = sg::testing::connect_loopback(port);  // reads time out after 5 s
        char c = 0;
        if (fd >= 0 && ::recv(fd, &c, 1, 0) == 1 && c == 'k') {
          client_ok.fetch_add(1);
        } else {
          client_bad.fetch_add(1);
        }
        if (fd >= 0) ::close(fd);
      }
      clients_left.fetch_sub(1);
    });
  }
  std::mt19937 rng(11);
  int rounds = 0;
  while (clients_left.load() > 0) {
    std::vector<exec::JoinHandle<void>> servers;
    for (std::size_t i = 0; i < listeners.size(); ++i) {
      servers.push_back(rt.spawn(accept_forever(listeners[i], answered, timeouts, static_cast<unsigned>(rounds * 8 + i))));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500 + rng() % 3000));
    for (auto& server : servers) server.cancel();  // dropped wherever it is: mid-wait, or between two accepts
    for (auto& server : servers) EXPECT_FALSE(server.wait());
    // What the ring took meanwhile is the listener's: answered here, as a stopping
    // listener serves it.
    auto rest = rt.spawn([&listeners, &answered]() -> exec::Task<void> {
      for (TcpListener& l : listeners) {
        for (auto& c : co_await l.stop_accepting()) answer(c.stream, answered);
      }
    });
    EXPECT_TRUE(rest.wait());
    ++rounds;
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(client_bad.load(), 0);
  EXPECT_EQ(client_ok.load(), kClients * kEach);
  EXPECT_EQ(answered.load(), kClients * kEach);  // each once: none lost, none twice
  EXPECT_GT(timeouts.load(), 0);
  EXPECT_GT(rounds, 20);
  std::printf("%d listener(s): %d rounds of accepting, %ld accepts timed out\n", copies, rounds, timeouts.load());
  for (TcpListener& l : listeners) l.close();
  EXPECT_TRUE(sg::testing::eventually([&] {
    for (const RingStats& r : rt.ring_stats()) {
      if (r.in_flight != 0) return false;
    }
    return true;
  })) << "operations left on the rings";
}

TEST_P(AcceptStress, EveryConnectionIsAnsweredOnceThroughDropsAndStops) {
  SG_DRIVER_RUNTIME(rt, sg::testing::workers(3));
  stress_accepts(rt, 1);
}

TEST_P(AcceptStress, EveryConnectionIsAnsweredOnceOnASharedSocket) {
  SG_DRIVER_RUNTIME(rt, sg::testing::workers(3));
  stress_accepts(rt, 2);
}

// A client's connection that waits for its byte, at most a second (the test's limit for
// a connection left queued); true when answered.
bool answered_within_a_second(uint16_t port) {
  int fd = sg::testing::connect_loopback(port);
  if (fd < 0) return false;
  timeval second{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &second, sizeof(second));
  char c = 0;
  const bool ok = ::recv(fd, &c, 1, 0) == 1;
  ::close(fd);
  return ok;
}

// A binary upgrade's hand-over: two runtimes (the old process, and the new one it started)
// accept on one socket, and the old one stops while a connection arrives. Its worker is
// busy (as one serving requests is) when the connection comes, so on io_uring the wake
// of its ring's accept, the first waiter on the socket, runs only when the worker next
// enters the ring, where the stop's cancel now comes first. The connection must still be
// answered: before TcpListener::take_backlog it stayed queued, the new runtime's accept
// never woken for it. Then the new runtime serves on alone. A new socket each round, so
// that no later accept on the socket finds the connection by looking afresh.
TEST_P(AcceptStress, AConnectionArrivingAsTheOldRuntimeStopsIsAnswered) {
  SG_DRIVER_RUNTIME(old_rt, sg::testing::workers(1));
  SG_DRIVER_RUNTIME(new_rt, sg::testing::workers(1));
  std::atomic<long> answered{0}, timeouts{0};
  auto serve_rest = [&answered](TcpListener& l) -> exec::Task<void> {
    for (auto& c : co_await l.stop_accepting()) answer(c.stream, answered);
  };
  constexpr int kRounds = 8;
  for (int round = 0; round < kRounds; ++round) {
    auto bound = TcpListener::bind(old_rt.context(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), {});
    ASSERT_TRUE(bound.ok());
    TcpListener old_l = std::move(*bound);
    auto adopted = TcpListener::adopt(new_rt.context(), ::fcntl(old_l.native_handle(), F_DUPFD_CLOEXEC, 0));
    ASSERT_TRUE(adopted.ok());
    TcpListener new_l = std::move(*adopted);
    const uint16_t port = old_l.local_endpoint().port();

    exec::JoinHandle<void> old_server = old_rt.spawn(accept_forever(old_l, answered, timeouts, round));
    EXPECT_TRUE(answered_within_a_second(port));  // the old runtime's accept is armed
    exec::JoinHandle<void> new_server = new_rt.spawn(accept_forever(new_l, answered, timeouts, round));
    std::this_thread::sleep_for(5ms);  // and the new one's, behind it
    old_server.cancel();
    EXPECT_FALSE(old_server.wait());
    std::atomic<bool> busy{false};
    exec::JoinHandle<void> stop = old_rt.spawn([&]() -> exec::Task<void> {
      busy.store(true);
      for (auto until = std::chrono::steady_clock::now() + 20ms; std::chrono::steady_clock::now() < until;) {
      }
      co_await serve_rest(old_l);
    });
    while (!busy.load()) std::this_thread::yield();
    EXPECT_TRUE(answered_within_a_second(port)) << "round " << round << ": the connection stayed queued";
    EXPECT_TRUE(stop.wait());
    EXPECT_TRUE(answered_within_a_second(port)) << "round " << round << ": the new runtime does not accept";
    new_server.cancel();
    EXPECT_FALSE(new_server.wait());
    EXPECT_TRUE(new_rt.spawn(serve_rest(new_l)).wait());
    old_l.close();
    new_l.close();
  }
  EXPECT_EQ(answered.load(), 3 * kRounds);
}

}  // namespace
}  // namespace sg::io
