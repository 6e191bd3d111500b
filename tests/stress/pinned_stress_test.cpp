// Worker-pinned tasks under concurrency, meant for ThreadSanitizer: groups of pinned tasks
// share a plain (non-atomic) counter and are woken by outside threads, by ordinary tasks on
// any worker and by timers, while ordinary work is stolen around them. A pinned task that
// ever ran on another thread would be a data race on the counter (TSan) and a wrong-worker
// count here; every wake must be seen.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "exec/notify.h"
#include "exec/runtime.h"
#include "exec/timers.h"
#include "../support/eventually.h"

namespace sg::exec {
namespace {

using namespace std::chrono_literals;
using sg::testing::eventually;

struct Group {
  long counter = 0;  // touched only by this group's pinned tasks, on their worker
  std::vector<std::unique_ptr<Notify>> bells;
};

TEST(PinnedStress, WokenFromEverywhereTheyStayHome) {
  RuntimeConfig cfg;
  cfg.worker_threads = 4;
  Runtime rt(cfg);
  constexpr int kGroups = 8, kPerGroup = 8, kRounds = 200;
  std::vector<std::unique_ptr<Group>> groups;
  for (int g = 0; g < kGroups; ++g) {
    auto grp = std::make_unique<Group>();
    for (int i = 0; i < kPerGroup; ++i) grp->bells.push_back(std::make_unique<Notify>());
    groups.push_back(std::move(grp));
  }
  std::atomic<int> wrong{0}, finished{0};
  std::vector<JoinHandle<void>> homes;
  for (auto& gp : groups) {
    Group* g = gp.get();
    homes.push_back(rt.spawn([g, &wrong, &finished]() -> Task<void> {
      const std::size_t home = tl_ctx.worker_index;
      std::vector<JoinHandle<void>> hs;
      for (auto& bell : g->bells) {
        Notify* b = bell.get();
        hs.push_back(spawn_local([g, b, home, &wrong]() -> Task<void> {
          for (int r = 0; r < kRounds; ++r) {
            co_await b->notified();
            if (tl_ctx.worker_index != home) wrong.fetch_add(1);
            ++g->counter;
            if (r % 50 == 0) co_await sleep_for(100us);
          }
        }));
      }
      for (auto& h : hs) co_await h;
      finished.fetch_add(1);
    }));
  }
  // Wakers: two outside threads and tasks on the workers ring every bell kRounds times
  // (a Notify keeps one permit, so ringing waits until the bell's task has taken it).
  auto ring_all = [&](int parity) {
    for (int r = 0; r < kRounds; ++r) {
      for (auto& gp : groups) {
        for (std::size_t i = parity; i < gp->bells.size(); i += 2) gp->bells[i]->notify_one();
      }
      std::this_thread::yield();
    }
  };
  std::thread outside([&] { ring_all(0); });
  std::atomic<int> task_rounds{0};
  rt.spawn_detached([&]() -> Task<void> {
    for (int r = 0; r < kRounds; ++r) {
      for (auto& gp : groups) {
        for (std::size_t i = 1; i < gp->bells.size(); i += 2) gp->bells[i]->notify_one();
      }
      co_await yield_now();
      task_rounds.fetch_add(1);
    }
  });
  // Ordinary work to steal meanwhile.
  for (int i = 0; i < 2000; ++i) rt.spawn_detached([] {});
  outside.join();
  // Permits collapse (notify_one on a bell with a permit stored is a no-op), so keep ringing
  // until every pinned task has seen its kRounds wakes.
  ASSERT_TRUE(eventually([&] {
    for (auto& gp : groups) {
      for (auto& b : gp->bells) b->notify_one();
    }
    return finished.load() == kGroups;
  }, 60s));
  for (auto& h : homes) h.wait();
  for (auto& gp : groups) EXPECT_EQ(gp->counter, static_cast<long>(kPerGroup) * kRounds);
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace sg::exec
