// A runtime whose workers each drive their own driver (the io_uring shape: a ring per
// worker): each driver is only ever parked and polled by its own worker's thread, every
// worker parks in its own driver (none waits on a condition variable behind another), a
// timer fires on the worker that armed it even while the others sleep, and an earlier
// timer is not held up by a worker parked until a later one.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "exec/runtime.h"
#include "exec/scheduler.h"
#include "exec/timers.h"
#include "../../support/eventually.h"
#include "../../support/workers.h"

namespace sg::exec {
namespace {

using namespace std::chrono_literals;
using sg::testing::eventually;
using sg::testing::workers;

// A SleepDriver that records which threads drive it and how often.
class RecordingDriver final : public Driver {
 public:
  uint32_t park(uint32_t max, std::optional<std::chrono::milliseconds> timeout) override {
    note_thread();
    parks.fetch_add(1);
    return sleep_.park(max, timeout);
  }
  uint32_t poll(uint32_t /*max*/) override {
    note_thread();
    return 0;
  }
  void unpark() override { sleep_.unpark(); }
  void shutdown() override {}

  std::atomic<int> parks{0};
  std::atomic<int> other_threads{0};  // drives from a thread other than the first

 private:
  void note_thread() {
    std::thread::id none{};
    std::thread::id me = std::this_thread::get_id();
    if (!owner_.compare_exchange_strong(none, me) && none != me) other_threads.fetch_add(1);
  }
  std::atomic<std::thread::id> owner_{};
  SleepDriver sleep_;
};

struct Drivers {
  std::vector<RecordingDriver*> all;
  DriverFactory factory() {
    return [this](std::size_t) {
      auto d = std::make_unique<RecordingDriver>();
      all.push_back(d.get());
      return d;
    };
  }
};

TEST(PerWorkerDrivers, EachDriverIsDrivenByItsOwnWorkerOnly) {
  Drivers d;
  Runtime rt(workers(3), d.factory());
  ASSERT_EQ(d.all.size(), 3u);
  // Work on every worker, with sleeps in between so that each parks repeatedly.
  std::vector<JoinHandle<void>> hs;
  for (int i = 0; i < 60; ++i) {
    hs.push_back(rt.spawn([]() -> Task<void> {
      for (int k = 0; k < 5; ++k) co_await sleep_for(2ms);
    }));
  }
  for (auto& h : hs) EXPECT_TRUE(h.wait());
  EXPECT_TRUE(eventually([&] {
    for (auto* r : d.all) if (r->parks.load() == 0) return false;
    return true;
  })) << "a worker never parked in its own driver";
  for (auto* r : d.all) EXPECT_EQ(r->other_threads.load(), 0);
  EXPECT_TRUE(rt.handle().scheduler()->per_worker_drivers());
}

TEST(PerWorkerDrivers, TimersFireOnTheirWorkerWhileTheOthersSleep) {
  Drivers d;
  Runtime rt(workers(2), d.factory());
  // One long sleeper and a chain of short ones: the short ones must end in their time
  // even though some worker is parked until the long one is due.
  auto longer = rt.spawn([]() -> Task<void> { co_await sleep_for(500ms); });
  auto t0 = Clock::now();
  auto shorter = rt.block_on([]() -> Task<int> {
    int n = 0;
    for (; n < 10; ++n) co_await sleep_for(5ms);
    co_return n;
  });
  ASSERT_TRUE(shorter.has_value());
  EXPECT_EQ(*shorter, 10);
  EXPECT_GE(Clock::now() - t0, 50ms);
  EXPECT_TRUE(longer.wait());
}

TEST(PerWorkerDrivers, AnEarlierTimerIsNotHeldUpByAWorkerParkedWithALaterTimeout) {
  Drivers d;
  Runtime rt(workers(1), d.factory());
  Timers& timers = rt.handle().scheduler()->timers();
  std::atomic<bool> late_done{false};
  auto late = rt.spawn([&]() -> Task<void> {
    co_await sleep_for(30s);
    late_done = true;
  });
  // The worker parks in its own driver until the late timer (its group is its shard).
  ASSERT_TRUE(eventually([&] { return timers.parked_until(0) > timers.now_ms(Clock::now()) + 20000; }));
  auto t0 = Clock::now();
  auto r = rt.block_on([]() -> Task<bool> {
    co_await sleep_for(10ms);
    co_return true;
  });
  ASSERT_TRUE(r.has_value());
  EXPECT_GE(Clock::now() - t0, 10ms);
  EXPECT_FALSE(late_done.load()) << "the short sleep only ended with the long one";
  late.cancel();
  EXPECT_FALSE(late.wait());
}

}  // namespace
}  // namespace sg::exec
