// A driver poll queues at most as many completions as the worker's local queue has room
// for: a burst of ready I/O larger than the queue stays in the reactor, in order, instead
// of overflowing into the injection queue (where it used to wait behind every later poll:
// a 100-250 ms p99 with 1,000 busy connections). And a worker whose queue never drains
// still sees its timers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <vector>

#include "io/reactor.h"
#include "io/tcp.h"

namespace sg::io {
namespace {

using namespace std::chrono_literals;

TEST(DriverBudget, BurstLargerThanTheLocalQueueDoesNotOverflow) {
  exec::RuntimeConfig cfg;
  cfg.worker_threads = 1;
  Runtime rt(cfg);
  constexpr int kTimers = 1000;  // ~4x the 256-slot local queue, all due at one instant
  std::atomic<int> done{0};
  auto deadline = Clock::now() + 50ms;
  std::vector<exec::JoinHandle<void>> hs;
  for (int i = 0; i < kTimers; ++i) {
    hs.push_back(rt.spawn([&, deadline]() -> exec::Task<void> {
      co_await sleep_until(deadline);
      done.fetch_add(1);
    }));
  }
  for (auto& h : hs) EXPECT_TRUE(h.wait());
  EXPECT_EQ(done.load(), kTimers);
  EXPECT_EQ(rt.exec().stats().total().overflows, 0u);
}

TEST(DriverBudget, BusyWorkerWithAFullQueueStillSeesItsTimers) {
  exec::RuntimeConfig cfg;
  cfg.worker_threads = 1;
  Runtime rt(cfg);
  std::atomic<bool> stop{false};
  std::vector<exec::JoinHandle<void>> busy;
  for (int i = 0; i < 300; ++i) {  // more yielding tasks than the local queue holds
    busy.push_back(rt.spawn([&]() -> exec::Task<void> {
      while (!stop.load(std::memory_order_relaxed)) co_await exec::yield_now();
    }));
  }
  auto woke = rt.spawn([]() -> exec::Task<bool> {
    co_await sleep_for(10ms);
    co_return true;
  });
  auto r = woke.wait();
  stop.store(true);
  for (auto& h : busy) h.wait();
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(*r);
}

}  // namespace
}  // namespace sg::io
