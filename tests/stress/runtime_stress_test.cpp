// Multi-threaded stress of the whole executor, meant for ThreadSanitizer: remote threads
// and tasks spawn concurrently, coroutine tasks ping-pong through Notify across workers,
// join each other, get cancelled mid-wait, and the runtime is torn down with work still
// queued. Checks that every task runs exactly once and nothing is lost.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "exec/notify.h"
#include "exec/runtime.h"
#include "../support/eventually.h"

namespace sg::exec {
namespace {

using namespace std::chrono_literals;

using sg::testing::eventually;
// Stress runs under TSan are slow: generous limits.
constexpr std::chrono::seconds kStressLimit{60};

TEST(RuntimeStress, MixedSpawnStealJoinCancel) {
  RuntimeConfig cfg;
  cfg.worker_threads = 4;
  Runtime rt(cfg);
  constexpr int kRemoteThreads = 3, kPerThread = 3000, kChildren = 8;
  constexpr int kTotal = kRemoteThreads * kPerThread * (1 + kChildren);
  auto ran = std::make_unique<std::atomic<int>[]>(kTotal);
  std::atomic<int> done{0};

  std::vector<std::thread> remotes;
  for (int r = 0; r < kRemoteThreads; ++r) {
    remotes.emplace_back([&, r] {
      for (int i = 0; i < kPerThread; ++i) {
        int base = (r * kPerThread + i) * (1 + kChildren);
        rt.handle().spawn_detached([&, base]() -> Task<void> {
          ran[base].fetch_add(1);
          std::vector<JoinHandle<int>> kids;
          for (int c = 1; c <= kChildren; ++c) {
            kids.push_back(spawn([&, base, c]() -> Task<int> {
              if (c % 2 == 0) co_await yield_now();
              ran[base + c].fetch_add(1);
              co_return c;
            }));
          }
          int sum = 0;
          for (auto& k : kids) sum += (co_await k).value_or(0);
          if (sum == kChildren * (kChildren + 1) / 2) done.fetch_add(1);
        });
      }
    });
  }
  for (auto& t : remotes) t.join();
  ASSERT_TRUE(eventually([&] { return done.load() == kRemoteThreads * kPerThread; }, kStressLimit));
  for (int i = 0; i < kTotal; ++i) ASSERT_EQ(ran[i].load(), 1) << i;
  auto s = rt.stats().total();
  EXPECT_GT(s.polls, 0u);
}

TEST(RuntimeStress, CrossWorkerPingPongAndCancellation) {
  RuntimeConfig cfg;
  cfg.worker_threads = 3;
  Runtime rt(cfg);
  constexpr int kPairs = 64, kRounds = 300;
  std::vector<std::unique_ptr<Notify>> notifies;
  for (int i = 0; i < 2 * kPairs; ++i) notifies.push_back(std::make_unique<Notify>());
  std::atomic<int> finished{0};
  for (int p = 0; p < kPairs; ++p) {
    Notify* a = notifies[2 * p].get();
    Notify* b = notifies[2 * p + 1].get();
    rt.handle().spawn_detached([a, b]() -> Task<void> {
      for (int i = 0; i < kRounds; ++i) {
        co_await a->notified();
        b->notify_one();
      }
    });
    rt.handle().spawn_detached([a, b, &finished]() -> Task<void> {
      for (int i = 0; i < kRounds; ++i) {
        a->notify_one();
        co_await b->notified();
      }
      finished.fetch_add(1);
    });
  }
  // Meanwhile: tasks that wait forever get cancelled from another thread.
  Notify never;
  std::vector<JoinHandle<void>> doomed;
  for (int i = 0; i < 200; ++i) {
    doomed.push_back(rt.spawn([&never]() -> Task<void> { co_await never.notified(); }));
  }
  for (auto& h : doomed) h.cancel();
  for (auto& h : doomed) EXPECT_FALSE(h.wait());
  ASSERT_TRUE(eventually([&] { return finished.load() == kPairs; }, kStressLimit));
}

// The priority lane under contention: pairs that flip their priority mark every round
// ping-pong across workers (their wake-ups land in priority and ordinary rings, both
// stolen from), beside ordinary spawn floods that overflow the local queues. Every pair
// must finish and every spawned task run exactly once.
TEST(RuntimeStress, PriorityLaneWithStealingAndOverflow) {
  RuntimeConfig cfg;
  cfg.worker_threads = 3;
  Runtime rt(cfg);
  constexpr int kPairs = 96, kRounds = 200, kFlood = 3000;
  std::vector<std::unique_ptr<Notify>> notifies;
  for (int i = 0; i < 2 * kPairs; ++i) notifies.push_back(std::make_unique<Notify>());
  std::atomic<int> finished{0};
  auto ran = std::make_unique<std::atomic<int>[]>(kFlood);
  std::atomic<int> flood_done{0};
  for (int p = 0; p < kPairs; ++p) {
    Notify* a = notifies[2 * p].get();
    Notify* b = notifies[2 * p + 1].get();
    rt.handle().spawn_detached([a, b, p]() -> Task<void> {
      for (int i = 0; i < kRounds; ++i) {
        set_current_task_priority((i + p) % 2 == 0);
        co_await a->notified();
        b->notify_one();
      }
    });
    rt.handle().spawn_detached([a, b, p, &finished]() -> Task<void> {
      set_current_task_priority(p % 3 == 0);
      for (int i = 0; i < kRounds; ++i) {
        a->notify_one();
        co_await b->notified();
      }
      finished.fetch_add(1);
    });
  }
  // A task spawning a flood (local queue overflow) while the pairs run.
  rt.handle().spawn_detached([&]() -> Task<void> {
    set_current_task_priority(true);
    for (int i = 0; i < kFlood; ++i) {
      spawn_detached([&, i] {
        ran[i].fetch_add(1);
        flood_done.fetch_add(1);
      });
      if (i % 500 == 0) co_await yield_now();
    }
  });
  ASSERT_TRUE(eventually([&] { return finished.load() == kPairs && flood_done.load() == kFlood; }, kStressLimit));
  for (int i = 0; i < kFlood; ++i) ASSERT_EQ(ran[i].load(), 1) << i;
  // Counters are published when workers park or every maintenance tick.
  EXPECT_TRUE(eventually([&] { return rt.stats().total().priority_schedules > 0; }, 10s));
}

TEST(RuntimeStress, RepeatedStartAndShutdownWithQueuedWork) {
  for (int round = 0; round < 30; ++round) {
    RuntimeConfig cfg;
    cfg.worker_threads = 2 + round % 3;
    auto rt = std::make_unique<Runtime>(cfg);
    std::atomic<int> ran{0};
    for (int i = 0; i < 2000; ++i) {
      rt->handle().spawn_detached([&ran]() -> Task<void> {
        co_await yield_now();
        ran.fetch_add(1);
      });
    }
    rt.reset();  // shuts down with most tasks still queued
    EXPECT_LE(ran.load(), 2000);
  }
}

}  // namespace
}  // namespace sg::exec
