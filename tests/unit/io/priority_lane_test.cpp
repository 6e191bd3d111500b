// The executor's priority lane, end to end through the I/O driver: a task marked with
// set_current_task_priority that is woken by a timer runs ahead of a run queue full of
// ordinary work; an unmarked one waits its turn behind it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <optional>
#include <chrono>
#include <vector>

#include "exec/context.h"
#include "io/runtime.h"
#include "io/tcp.h"
#include "io/wait.h"

namespace sg::io {
namespace {

using namespace std::chrono_literals;

// Busy tasks: each poll spins ~20 us, counts itself, and yields to the back of the queue.
constexpr int kBusyTasks = 200;

void spin_for(std::chrono::microseconds d) {
  auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

// Median number of ordinary polls that ran after a timer's deadline had passed and before
// the task waiting on it resumed (one worker, so nothing runs concurrently with it).
int64_t late_polls_median(bool priority) {
  exec::RuntimeConfig cfg;
  cfg.worker_threads = 1;
  Runtime rt(cfg);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> late{0};
  std::atomic<int64_t> deadline_ns{INT64_MAX};
  auto now_ns = [] { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); };
  std::vector<exec::JoinHandle<void>> busy;
  for (int i = 0; i < kBusyTasks; ++i) {
    busy.push_back(rt.spawn([&]() -> exec::Task<void> {
      while (!stop.load(std::memory_order_relaxed)) {
        spin_for(20us);
        if (now_ns() >= deadline_ns.load(std::memory_order_relaxed)) late.fetch_add(1, std::memory_order_relaxed);
        co_await exec::yield_now();
      }
    }));
  }
  std::optional<std::vector<int64_t>> gaps = rt.block_on([&]() -> exec::Task<std::vector<int64_t>> {
    exec::set_current_task_priority(priority);
    std::vector<int64_t> out;
    for (int round = 0; round < 9; ++round) {
      auto deadline = Clock::now() + 5ms;
      late.store(0);
      deadline_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count());
      co_await sleep_until(deadline);
      out.push_back(late.load());
      deadline_ns.store(INT64_MAX);
    }
    co_return out;
  });
  stop.store(true);
  for (auto& h : busy) h.wait();
  EXPECT_TRUE(gaps.has_value());
  if (!gaps) return -1;
  std::sort(gaps->begin(), gaps->end());
  return (*gaps)[gaps->size() / 2];
}

TEST(PriorityLane, TimerWakeOfPriorityTaskSkipsTheQueue) {
  // The driver is polled every event_interval (61) ticks while the worker is busy, so up to
  // ~61 ordinary polls pass before the timer is even seen; then the priority task runs
  // next. An ordinary task also waits behind the ~200 queued busy tasks.
  int64_t with_priority = late_polls_median(true);
  int64_t ordinary = late_polls_median(false);
  std::printf("late ordinary polls (median): priority task %lld, ordinary task %lld\n",
              static_cast<long long>(with_priority), static_cast<long long>(ordinary));
  EXPECT_LT(with_priority, 100) << "ordinary: " << ordinary;
  EXPECT_GT(ordinary, 150) << "priority: " << with_priority;
}

}  // namespace
}  // namespace sg::io
