// Socket waits racing their cancellation, on both drivers (run under ThreadSanitizer in
// the test command). Many tasks on several workers wait for a socket with a deadline of a
// millisecond or two while another thread writes single bytes at random moments, so that
// readiness completions, deadline wake-ups, cancels from the waiting worker and from
// another one (a task stolen after its wake-up) and frees of the operations all race.
// Every wait must end as readable or timed out, never both and never neither; every byte
// written is read exactly once; and once the tasks are gone no operation is left on any
// ring. A second round drops tasks in the middle of their waits (cancelled from the test
// thread) and checks the same.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "exec/scheduler.h"
#include "io/tcp.h"
#include "io/uring.h"
#include "../support/eventually.h"
#include "../support/io_drivers.h"
#include "../support/workers.h"

namespace sg::io {
namespace {

using namespace std::chrono_literals;

class WaitCancelStress : public ::testing::TestWithParam<IoDriverKind> {};
INSTANTIATE_TEST_SUITE_P(Drivers, WaitCancelStress, sg::testing::kDrivers, sg::testing::driver_test_name);

struct Pair {
  int writer = -1;
  Socket reader;
};

std::vector<Pair> make_pairs(Runtime& rt, int n) {
  std::vector<Pair> out(static_cast<std::size_t>(n));
  for (auto& p : out) {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    p.writer = sv[1];
    auto s = Socket::adopt(rt.context(), sv[0]);
    p.reader = std::move(s);
  }
  return out;
}

std::vector<UringDriver*> rings(Runtime& rt) {
  std::vector<UringDriver*> out;
  if (rt.driver_kind() != IoDriverKind::kIoUring) return out;
  exec::Scheduler* s = rt.handle().scheduler();
  for (std::size_t i = 0; i < s->num_workers(); ++i) out.push_back(static_cast<UringDriver*>(s->driver_slot(i).driver));
  return out;
}

std::size_t ops_in_flight(Runtime& rt) {
  std::size_t n = 0;
  for (UringDriver* r : rings(rt)) n += r->in_flight();
  return n;
}

void report_cancels(Runtime& rt) {
  uint64_t local = 0, remote = 0;
  for (UringDriver* r : rings(rt)) {
    local += r->cancels();
    remote += r->remote_cancels();
  }
  std::printf("poll cancels: %llu by the ring's worker, %llu queued from another thread\n",
              static_cast<unsigned long long>(local), static_cast<unsigned long long>(remote));
  if (rt.driver_kind() == IoDriverKind::kIoUring) {
    EXPECT_GT(local + remote, 0u);
  }
}

TEST_P(WaitCancelStress, WaitsRacingDeadlinesLoseNothingAndLeaveNoOperation) {
  SG_DRIVER_RUNTIME(rt, sg::testing::workers(3));
  constexpr int kTasks = 64;
  constexpr int kWaits = 150;
  auto pairs = make_pairs(rt, kTasks);
  std::atomic<long> readable{0}, timed_out{0}, other{0}, bytes_read{0}, bytes_written{0};
  std::atomic<bool> stop{false};
  std::vector<exec::JoinHandle<void>> hs;
  for (int t = 0; t < kTasks; ++t) {
    hs.push_back(rt.spawn([&, t]() -> exec::Task<void> {
      Socket& s = pairs[static_cast<std::size_t>(t)].reader;
      for (int i = 0; i < kWaits; ++i) {
        std::error_code ec = co_await wait_ready(s, Interest::kRead, Deadline::after(std::chrono::milliseconds(1 + i % 2)));
        if (!ec) {
          readable.fetch_add(1);
          char buf[64];
          for (;;) {
            ssize_t n = ::recv(s.native_handle(), buf, sizeof(buf), 0);
            if (n <= 0) break;
            bytes_read.fetch_add(n);
          }
        } else if (ec == std::errc::timed_out) {
          timed_out.fetch_add(1);
        } else {
          other.fetch_add(1);
        }
        if (i % 7 == 0) co_await exec::yield_now();  // give thieves something to steal
      }
    }));
  }
  std::thread writer([&] {
    std::mt19937 rng(42);
    while (!stop.load()) {
      auto& p = pairs[rng() % pairs.size()];
      char c = 'x';
      if (::send(p.writer, &c, 1, MSG_NOSIGNAL) == 1) bytes_written.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(50 + rng() % 200));
    }
  });
  for (auto& h : hs) EXPECT_TRUE(h.wait());
  stop = true;
  writer.join();
  EXPECT_EQ(readable + timed_out, long{kTasks} * kWaits);
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(readable.load(), 0);
  EXPECT_GT(timed_out.load(), 0);
  // What the waits did not read is still in the sockets: drain it, then count.
  for (auto& p : pairs) {
    char buf[256];
    for (ssize_t n; (n = ::recv(p.reader.native_handle(), buf, sizeof(buf), 0)) > 0;) bytes_read += n;
  }
  EXPECT_EQ(bytes_read.load(), bytes_written.load());
  report_cancels(rt);
  EXPECT_TRUE(sg::testing::eventually([&] { return ops_in_flight(rt) == 0; }))
      << ops_in_flight(rt) << " operations still on the rings";
  for (auto& p : pairs) ::close(p.writer);
}

TEST_P(WaitCancelStress, TasksDroppedWhileWaitingLeaveNoOperation) {
  SG_DRIVER_RUNTIME(rt, sg::testing::workers(3));
  constexpr int kTasks = 200;
  auto pairs = make_pairs(rt, kTasks);
  std::atomic<int> waiting{0};
  std::vector<exec::JoinHandle<void>> hs;
  for (int t = 0; t < kTasks; ++t) {
    hs.push_back(rt.spawn([&, t]() -> exec::Task<void> {
      Socket& s = pairs[static_cast<std::size_t>(t)].reader;
      waiting.fetch_add(1);
      // Half wait forever, half with a deadline that may fire while they are dropped.
      Deadline dl = t % 2 == 0 ? Deadline::never() : Deadline::after(std::chrono::milliseconds(t % 5));
      for (;;) (void)co_await wait_ready(s, Interest::kRead, dl);
    }));
  }
  ASSERT_TRUE(sg::testing::eventually([&] { return waiting.load() == kTasks; }));
  // Some become readable while they are dropped.
  for (int t = 0; t < kTasks; t += 3) ASSERT_EQ(::send(pairs[static_cast<std::size_t>(t)].writer, "y", 1, 0), 1);
  for (auto& h : hs) h.cancel();
  for (auto& h : hs) EXPECT_FALSE(h.wait());
  report_cancels(rt);
  EXPECT_TRUE(sg::testing::eventually([&] { return ops_in_flight(rt) == 0; }))
      << ops_in_flight(rt) << " operations still on the rings";
  for (auto& p : pairs) ::close(p.writer);
}

}  // namespace
}  // namespace sg::io
