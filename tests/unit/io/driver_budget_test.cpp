// A driver poll queues at most as many completions as the worker's local queue has room
// for: a burst of ready I/O larger than the queue stays in the reactor, in order, instead
// of overflowing into the injection queue (where it used to wait behind every later poll:
// a 100-250 ms p99 with 1,000 busy connections). And a worker whose queue never drains
// still sees its timers. The room counted is that of the fuller of the two lanes a wake
// may go to (the ordinary queue, the priority lane of admitted requests).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "exec/context.h"
#include "io/runtime.h"
#include "io/tcp.h"
#include "../../support/io_drivers.h"

namespace sg::io {
namespace {

using namespace std::chrono_literals;

// One burst: kTimers tasks sleep until `window` from now. Returns false when the burst was
// not set up in time (a slow build: the deadline passed while tasks were still being
// spawned, so some never armed a timer and the rest fired beside a queue full of spawns).
// `priority`: the tasks wait as admitted requests do, so their wakes go to the priority lane.
bool burst_without_overflow(IoDriverKind kind, std::chrono::milliseconds window, bool priority) {
  exec::RuntimeConfig cfg;
  cfg.worker_threads = 1;
  auto owner = sg::testing::make_runtime(kind, cfg);
  if (owner == nullptr) return true;
  Runtime& rt = *owner;
  constexpr int kTimers = 1000;  // ~4x the 256-slot local queue, all due at one instant
  std::atomic<int> armed{0};
  std::atomic<int> done{0};
  auto deadline = Clock::now() + window;
  std::vector<exec::JoinHandle<void>> hs;
  for (int i = 0; i < kTimers; ++i) {
    hs.push_back(rt.spawn([&, deadline, priority]() -> exec::Task<void> {
      if (priority) exec::set_current_task_priority(true);
      armed.fetch_add(1);
      co_await sleep_until(deadline);
      done.fetch_add(1);
    }));
  }
  while (armed.load() < kTimers && Clock::now() < deadline) std::this_thread::yield();
  bool in_time = armed.load() == kTimers && Clock::now() < deadline - window / 2;
  for (auto& h : hs) EXPECT_TRUE(h.wait());
  EXPECT_EQ(done.load(), kTimers);
  if (!in_time) return false;
  EXPECT_EQ(rt.exec().stats().total().overflows, 0u);
  return true;
}

class DriverBudget : public ::testing::TestWithParam<IoDriverKind> {};
INSTANTIATE_TEST_SUITE_P(Drivers, DriverBudget, sg::testing::kDrivers, sg::testing::driver_test_name);

// Runs the burst, widening the window until a slow build has armed every timer in time.
void expect_bursts_without_overflow(IoDriverKind kind, bool priority) {
  auto window = 50ms;
  while (!burst_without_overflow(kind, window, priority)) {
    window *= 2;
    ASSERT_LE(window, 60s) << "could not arm 1,000 timers within a minute";
  }
}

TEST_P(DriverBudget, BurstLargerThanTheLocalQueueDoesNotOverflow) {
  if (!sg::testing::driver_available(GetParam(), "DriverBudget.BurstLargerThanTheLocalQueueDoesNotOverflow")) {
    GTEST_SKIP() << "io_uring is not available here";
  }
  expect_bursts_without_overflow(GetParam(), false);
}

TEST_P(DriverBudget, BurstLargerThanThePriorityLaneDoesNotOverflow) {
  if (!sg::testing::driver_available(GetParam(), "DriverBudget.BurstLargerThanThePriorityLaneDoesNotOverflow")) {
    GTEST_SKIP() << "io_uring is not available here";
  }
  expect_bursts_without_overflow(GetParam(), true);
}

TEST_P(DriverBudget, BusyWorkerWithAFullQueueStillSeesItsTimers) {
  exec::RuntimeConfig cfg;
  cfg.worker_threads = 1;
  SG_DRIVER_RUNTIME(rt, cfg);
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
