// The executor's timers on a runtime without I/O (its driver's holder sleeps in a
// SleepDriver): sleeps never end early and do end, in deadline order; a timer earlier
// than the parked holder's timeout wakes it; cancelled and shut-down waits leave nothing
// behind. Time bounds here are only lower bounds (a timer must never fire early) and
// generous liveness limits, never speed thresholds.
#include "exec/timers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <vector>

#include "exec/runtime.h"
#include "exec/scheduler.h"
#include "../../support/drop_flag.h"
#include "../../support/eventually.h"
#include "../../support/workers.h"

namespace sg::exec {
namespace {

using namespace std::chrono_literals;
using sg::testing::eventually;

using sg::testing::workers;

Timers& timers_of(Runtime& rt) { return rt.handle().scheduler()->timers(); }


TEST(Timers, SleepNeverEndsBeforeItsTime) {
  Runtime rt(workers(2));
  for (auto d : {1ms, 5ms, 30ms, 70ms}) {
    auto elapsed = rt.block_on([d]() -> Task<Clock::duration> {
      auto t0 = Clock::now();
      co_await sleep_for(d);
      co_return Clock::now() - t0;
    });
    EXPECT_GE(elapsed, d);
  }
  EXPECT_EQ(timers_of(rt).pending(), 0u);
}

TEST(Timers, SleepsEndInDeadlineOrder) {
  // One worker, so that tasks run in the order their timers fired (with two, a batch of
  // timers that fire together is shared out and may finish in any order).
  Runtime rt(workers(1));
  std::mutex mu;
  std::vector<int> order;
  std::vector<JoinHandle<void>> hs;
  // Deadlines 3 ms apart (the wheel's resolution is 1 ms), spawned in reverse, all armed
  // well before the first is due.
  const auto base = Clock::now() + 300ms;
  for (int i = 20; i >= 0; --i) {
    hs.push_back(rt.spawn([&, i]() -> Task<void> {
      co_await sleep_until(base + std::chrono::milliseconds(3 * i));
      std::lock_guard lk(mu);
      order.push_back(i);
    }));
  }
  ASSERT_TRUE(eventually([&] { return timers_of(rt).pending() == 21; }));
  ASSERT_LT(Clock::now(), base) << "the timers were not all armed before the first was due";
  for (auto& h : hs) ASSERT_TRUE(h.wait());
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(order, sorted);
}

TEST(Timers, EarlierTimerWakesTheParkedHolder) {
  // One worker parks in the driver with a 10 s timeout (the long sleep); a short sleep
  // armed from a task spawned afterwards must not wait for that timeout.
  Runtime rt(workers(1));
  std::atomic<bool> long_done{false};
  auto long_sleep = rt.spawn([&]() -> Task<void> {
    co_await sleep_for(10s);
    long_done = true;
  });
  ASSERT_TRUE(eventually([&] { return timers_of(rt).pending() == 1; }));
  // The worker parks in the driver with the 10 s timeout once the task has armed it.
  ASSERT_TRUE(eventually([&] { return timers_of(rt).parked_until() > timers_of(rt).now_ms(Clock::now()) + 5000; }));
  auto t0 = Clock::now();
  auto short_sleep = rt.spawn([]() -> Task<void> { co_await sleep_for(30ms); });
  ASSERT_TRUE(short_sleep.wait());
  EXPECT_GE(Clock::now() - t0, 30ms);
  EXPECT_FALSE(long_done.load()) << "the short sleep only ended with the long one";
  long_sleep.cancel();
  EXPECT_FALSE(long_sleep.wait());
}

TEST(Timers, CancelledSleepLeavesNoTimer) {
  Runtime rt(workers(2));
  std::atomic<bool> dropped{false};
  auto h = rt.spawn([&]() -> Task<void> {
    sg::testing::DropFlag f{&dropped};
    co_await sleep_for(1h);
  });
  ASSERT_TRUE(eventually([&] { return timers_of(rt).pending() == 1; }));
  h.cancel();
  EXPECT_FALSE(h.wait());
  EXPECT_TRUE(dropped.load());
  EXPECT_EQ(timers_of(rt).pending(), 0u);
}

TEST(Timers, ShutdownDropsSleepingTasks) {
  std::atomic<bool> dropped{false};
  {
    Runtime rt(workers(2));
    rt.spawn_detached([&]() -> Task<void> {
      sg::testing::DropFlag f{&dropped};
      co_await sleep_for(1h);
    });
    ASSERT_TRUE(eventually([&] { return timers_of(rt).pending() == 1; }));
  }
  EXPECT_TRUE(dropped.load());
}

TEST(Timers, PastDeadlineCompletesAtOnce) {
  Runtime rt(workers(1));
  auto n = rt.block_on([]() -> Task<int> {
    int count = 0;
    for (int i = 0; i < 1000; ++i) {  // far more than one coop budget: yields in between
      co_await sleep_until(Clock::now() - 1s);
      ++count;
    }
    co_return count;
  });
  EXPECT_EQ(n, 1000);
}

}  // namespace
}  // namespace sg::exec
