// Concurrency of the executor's timers (meant for ThreadSanitizer): timers armed, fired
// and cancelled from every worker and a foreign thread at once, tasks stolen between
// arming and cancelling, and timeouts racing permit grants. Every task must end exactly
// once, no timer may be left behind, and a timed-out waiter must never also keep a
// permit (a stale completion would lose or duplicate one).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "exec/runtime.h"
#include "exec/scheduler.h"
#include "exec/semaphore.h"
#include "exec/timers.h"
#include "../support/workers.h"

namespace sg::exec {
namespace {

using namespace std::chrono_literals;

using sg::testing::workers;

TEST(TimerStress, SleepsRacingForeignCancellation) {
  Runtime rt(workers(2));
  constexpr int kTasks = 2000;
  constexpr int kRounds = 10;
  std::atomic<int> finished{0};
  std::vector<JoinHandle<int>> hs;
  hs.reserve(kTasks);
  for (int i = 0; i < kTasks; ++i) {
    hs.push_back(rt.spawn([&finished, i]() -> Task<int> {
      std::minstd_rand rng(static_cast<uint32_t>(i));
      for (int r = 0; r < kRounds; ++r) {
        // 0-3 ms, or now and then a long one that only cancellation can end.
        auto d = (rng() % 50 == 0) ? 1h : std::chrono::microseconds(rng() % 3000);
        co_await sleep_for(d);
        // Spawning from here lets the other worker steal us between rounds.
        if (r % 3 == 0) co_await yield_now();
      }
      finished.fetch_add(1);
      co_return 1;
    }));
  }
  std::thread canceller([&] {
    std::minstd_rand rng(7);
    for (int i = 0; i < kTasks / 4; ++i) {
      hs[rng() % kTasks].cancel();
      if (i % 16 == 0) std::this_thread::yield();
    }
  });
  canceller.join();
  // About 60% never draw a long sleep nor a cancellation: wait for a third to finish,
  // then end the rest (a 1 h sleep can only end by cancellation).
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (finished.load() < kTasks / 3 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  ASSERT_GE(finished.load(), kTasks / 3) << "sleeps did not end";
  for (auto& h : hs) h.cancel();
  int completed = 0;
  for (auto& h : hs) completed += h.wait().has_value() ? 1 : 0;
  EXPECT_EQ(completed, finished.load());
  EXPECT_EQ(rt.handle().scheduler()->timers().pending(), 0u);
}

// A WaitTimeout on the executor's timers (what io::DeadlineTimeout is, without sockets).
class TimerTimeout final : public WaitTimeout {
 public:
  explicit TimerTimeout(Clock::time_point at) : at_(at) {}
  void arm(Waker w) override {
    if (!entry_.arm(*current_timers(), at_, w, 1)) std::move(w).wake({{}, 1});
  }
  void cancel() override { entry_.cancel(); }

 private:
  Clock::time_point at_;
  TimerEntry entry_;
};

TEST(TimerStress, TimeoutsRacingPermitGrantsConservePermits) {
  Runtime rt(workers(2));
  constexpr int kPermits = 4;
  constexpr int kTasks = 400;
  constexpr int kRounds = 25;
  Semaphore sem(kPermits, kTasks);
  std::atomic<int> holders{0};
  std::atomic<int> max_holders{0};
  std::atomic<int> acquired{0};
  std::atomic<int> timed_out{0};
  std::vector<JoinHandle<void>> hs;
  for (int i = 0; i < kTasks; ++i) {
    hs.push_back(rt.spawn([&, i]() -> Task<void> {
      std::minstd_rand rng(static_cast<uint32_t>(i) + 1000);
      for (int r = 0; r < kRounds; ++r) {
        // Timeouts of 0-2 ms against holds of 0-1 ms: both outcomes are frequent and
        // often land in the same instant.
        TimerTimeout to(tick_now() + std::chrono::microseconds(rng() % 2000));
        AcquireStatus s = co_await sem.acquire(&to);
        if (s != AcquireStatus::kAcquired) {
          timed_out.fetch_add(1);
          continue;
        }
        Semaphore::Permit p(&sem);
        int now = holders.fetch_add(1) + 1;
        int seen = max_holders.load();
        while (now > seen && !max_holders.compare_exchange_weak(seen, now)) {
        }
        acquired.fetch_add(1);
        co_await sleep_for(std::chrono::microseconds(rng() % 1000));
        holders.fetch_sub(1);
      }
    }));
  }
  for (auto& h : hs) ASSERT_TRUE(h.wait());
  EXPECT_EQ(acquired.load() + timed_out.load(), kTasks * kRounds);
  EXPECT_GT(timed_out.load(), 0) << "no timeout raced a grant";
  EXPECT_GT(acquired.load(), kPermits) << "no grant raced a timeout";
  EXPECT_LE(max_holders.load(), kPermits) << "a permit was handed out twice";
  // Every permit came back: exactly kPermits can be taken now, no more.
  int free_now = 0;
  while (sem.try_acquire()) ++free_now;
  EXPECT_EQ(free_now, kPermits);
  EXPECT_EQ(rt.handle().scheduler()->timers().pending(), 0u);
}

}  // namespace
}  // namespace sg::exec
