// BurstTask under contention (run under ThreadSanitizer in the test command): many tasks
// on several workers, each alternating short bursts with a wait between them that two
// completers race for: a deadline of 0-2 ms on the timing wheels, and a test thread that
// fires the same wait from outside at random moments. A third thread cancels tasks at
// random through a registry, as the gateway's drain does (entries linked by the task's
// first burst and unlinked by its body's destructor, both under the registry's lock).
// Every body must be destroyed exactly once, every wait must be completed once (each
// woken() call answers one armed wait), and no task may be left alive.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "exec/burst_task.h"
#include "exec/scheduler.h"
#include "exec/timers.h"
#include "../support/eventually.h"
#include "../support/waker_slot.h"

namespace sg::exec {
namespace {

using namespace std::chrono_literals;
using sg::testing::WakerSlot;

constexpr std::size_t kTagOutside = 1;
constexpr std::size_t kTagDeadline = 2;

struct Registry {
  std::mutex mu;
  std::set<JoinableTask*> live;  // tasks whose body is alive (safe to cancel under mu)
};

struct Counts {
  std::atomic<int> ended{0};
  std::atomic<int> bursts{0};
  std::atomic<int> wakes{0};
  std::atomic<int> by_deadline{0};
  std::atomic<int> by_outside{0};
};

struct RacedBody {
  Registry& reg;
  WakerSlot& slot;
  Counts& counts;
  int left;  // bursts to run before ending on its own
  TimerEntry timer;
  JoinableTask* self = nullptr;
  uint32_t seed;

  RacedBody(Registry& r, WakerSlot& s, Counts& c, int bursts, uint32_t sd) : reg(r), slot(s), counts(c), left(bursts), seed(sd) {}
  ~RacedBody() {
    timer.cancel();
    slot.take();
    if (self != nullptr) {
      std::lock_guard lk(reg.mu);
      reg.live.erase(self);
    }
    counts.ended.fetch_add(1);
  }

  Task<bool> burst() { return run(); }
  Task<bool> run() {
    if (self == nullptr) {
      self = current_task();
      std::lock_guard lk(reg.mu);
      reg.live.insert(self);
    }
    counts.bursts.fetch_add(1);
    if (seed % 3 == 0) co_await yield_now();
    co_return --left > 0;
  }
  void idle(Waker w) {
    seed = seed * 1103515245u + 12345u;
    const auto at = Clock::now() + std::chrono::microseconds((seed >> 8) % 2000);
    Waker for_timer = w.clone();
    Timers* t = current_timers();
    if (t == nullptr || !timer.arm(*t, at, for_timer, kTagDeadline)) {
      std::move(for_timer).wake({std::error_code{}, kTagDeadline});
    }
    slot.put(std::move(w));
  }
  BurstWake woken(const WaitResult& r) {
    timer.cancel();
    slot.take();
    counts.wakes.fetch_add(1);
    (r.value == kTagDeadline ? counts.by_deadline : counts.by_outside).fetch_add(1);
    return BurstWake::kBurst;
  }
};

TEST(BurstStress, WaitsRacedByDeadlinesOutsideWakesAndCancels) {
  RuntimeConfig cfg;
  cfg.worker_threads = 4;
  Runtime rt(cfg);
  constexpr int kTasks = 300, kBursts = 200;
  Registry reg;
  Counts counts;
  std::vector<WakerSlot> slots(kTasks);
  rt.block_on([&] {
    for (int i = 0; i < kTasks; ++i) {
      spawn_bursts<RacedBody>({TaskKind::kConnection, "raced"}, reg, slots[static_cast<std::size_t>(i)], counts,
                              kBursts, static_cast<uint32_t>(i * 7919 + 1));
    }
  });
  std::atomic<bool> stop{false};
  std::thread outside([&] {
    std::mt19937 rng(1);
    for (uint32_t n = 1; !stop.load(); ++n) {
      slots[rng() % kTasks].take().wake({std::error_code{}, kTagOutside});
      // Unthrottled, this thread could complete every wait before a 1-2 ms deadline came
      // due (all 60,000 in 15 ms: 4 runs in 30 without a single deadline win).
      if (n % 64 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  std::atomic<int> cancelled{0};
  std::thread canceller([&] {
    std::mt19937 rng(2);
    while (!stop.load() && cancelled.load() < kTasks / 4) {
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 500));
      std::lock_guard lk(reg.mu);
      if (reg.live.empty()) continue;
      auto it = reg.live.begin();
      std::advance(it, static_cast<long>(rng() % reg.live.size()));
      cancel_task(*it);
      cancelled.fetch_add(1);
    }
  });
  const bool all_ended = sg::testing::eventually([&] { return counts.ended.load() == kTasks; }, 60s);
  stop.store(true);
  outside.join();
  canceller.join();
  ASSERT_TRUE(all_ended) << counts.ended.load() << " of " << kTasks << " bodies destroyed";
  EXPECT_TRUE(sg::testing::eventually([&] { return rt.handle().scheduler()->live_tasks() == 0; }));
  // Each task's first burst, then one burst per completed wait (woken() says go on, and
  // a cancel is only possible once the first burst registered the task).
  EXPECT_EQ(counts.bursts.load(), kTasks + counts.wakes.load());
  EXPECT_GT(cancelled.load(), 0);
  EXPECT_EQ(counts.wakes.load(), counts.by_deadline.load() + counts.by_outside.load());
  EXPECT_GT(counts.by_deadline.load(), 0);
  EXPECT_GT(counts.by_outside.load(), 0);
}

}  // namespace
}  // namespace sg::exec
