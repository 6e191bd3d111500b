// Worker-pinned tasks (spawn_local): they always run on the worker that spawned them,
// whoever wakes them; they may share state that is not thread-safe; they are not starved by
// a busy local queue; a worker runs them before it parks; shutdown drops the queued ones in
// queue order.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "exec/notify.h"
#include "exec/runtime.h"
#include "exec/timers.h"
#include "../../support/eventually.h"
#include "../../support/spin.h"
#include "../../support/workers.h"

namespace sg::exec {
namespace {

using namespace std::chrono_literals;
using sg::testing::eventually;
using sg::testing::workers;

std::size_t current_worker() { return tl_ctx.worker_index; }

using sg::testing::spin_for;

// Spawns 64 tasks from one task, each polled 50 times with 20 us of work per poll, and
// counts the polls that ran on another worker than the spawner's.
int polls_away_from_home(bool pinned) {
  Runtime rt(workers(4));
  constexpr int kTasks = 64, kPolls = 50;
  std::atomic<int> away{0}, done{0};
  rt.block_on([&]() -> Task<void> {
    const std::size_t home = current_worker();
    std::vector<JoinHandle<void>> hs;
    for (int i = 0; i < kTasks; ++i) {
      auto body = [&, home]() -> Task<void> {
        for (int k = 0; k < kPolls; ++k) {
          if (current_worker() != home) away.fetch_add(1);
          spin_for(20us);
          co_await yield_now();
        }
        done.fetch_add(1);
      };
      hs.push_back(pinned ? spawn_local(body) : spawn(body));
    }
    for (auto& h : hs) co_await h;
  });
  EXPECT_EQ(done.load(), kTasks);
  return away.load();
}

TEST(PinnedTasks, AlwaysRunOnTheSpawningWorkerWhileOthersSteal) {
  // The same tasks spawned ordinarily are stolen by the idle workers (so the setup can
  // tell); pinned, none of their polls runs elsewhere.
  EXPECT_GT(polls_away_from_home(false), 0);
  EXPECT_EQ(polls_away_from_home(true), 0);
}

TEST(PinnedTasks, ShareStateThatIsNotThreadSafe) {
  // A plain counter and vector, touched only by tasks pinned to one worker: no atomics, no
  // lock, and (under ThreadSanitizer) no race.
  Runtime rt(workers(4));
  struct Shared {
    long counter = 0;
    std::vector<int> log;
  };
  auto shared = std::make_shared<Shared>();
  rt.block_on([shared]() -> Task<void> {
    std::vector<JoinHandle<void>> hs;
    for (int i = 0; i < 32; ++i) {
      hs.push_back(spawn_local([shared, i]() -> Task<void> {
        for (int k = 0; k < 100; ++k) {
          ++shared->counter;
          co_await yield_now();
        }
        shared->log.push_back(i);
      }));
    }
    for (auto& h : hs) co_await h;
  });
  EXPECT_EQ(shared->counter, 32 * 100);
  EXPECT_EQ(shared->log.size(), 32u);
}

TEST(PinnedTasks, WakesFromOtherThreadsAndWorkersComeBackToTheirWorker) {
  Runtime rt(workers(3));
  Notify from_outside, from_task;
  std::atomic<int> wrong{0};
  std::atomic<bool> waiting_outside{false}, waiting_task{false};
  std::atomic<std::size_t> home{0};
  auto h = rt.spawn([&]() -> Task<void> {
    home = current_worker();
    auto pinned = spawn_local([&]() -> Task<void> {
      waiting_outside = true;
      co_await from_outside.notified();  // woken by the test thread
      if (current_worker() != home.load()) wrong.fetch_add(1);
      waiting_task = true;
      co_await from_task.notified();  // woken by a task that may run on any worker
      if (current_worker() != home.load()) wrong.fetch_add(1);
      co_await sleep_for(1ms);  // woken by a timer
      if (current_worker() != home.load()) wrong.fetch_add(1);
    });
    co_await pinned;
  });
  ASSERT_TRUE(eventually([&] { return waiting_outside.load() && from_outside.waiter_count() == 1; }));
  from_outside.notify_one();
  ASSERT_TRUE(eventually([&] { return waiting_task.load() && from_task.waiter_count() == 1; }));
  for (int i = 0; i < 8; ++i) rt.spawn([&] {}).wait();  // some traffic on the other workers
  rt.spawn([&] { from_task.notify_one(); }).wait();
  h.wait();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(PinnedTasks, ABusyLocalQueueDoesNotStarveThem) {
  // One worker: an ordinary task yields in a loop (its local queue is never empty) until a
  // pinned task has run 100 times; the pinned FIFO's fairness turn lets it run meanwhile.
  Runtime rt(workers(1));
  constexpr int kGiveUp = 1'000'000;
  std::atomic<int> pinned_runs{0};
  int hog_yields = 0;
  rt.block_on([&]() -> Task<void> {
    auto pinned = spawn_local([&]() -> Task<void> {
      for (int i = 0; i < 100; ++i) {
        pinned_runs.fetch_add(1);
        co_await yield_now();
      }
    });
    auto hog = spawn([&]() -> Task<void> {
      while (pinned_runs.load() < 100 && hog_yields < kGiveUp) {
        ++hog_yields;
        co_await yield_now();
      }
    });
    co_await pinned;
    co_await hog;
  });
  EXPECT_EQ(pinned_runs.load(), 100);
  EXPECT_LT(hog_yields, kGiveUp);
}

TEST(PinnedTasks, SpawnLocalOutsideAWorkerIsAnError) {
  EXPECT_THROW(spawn_local([] {}), std::logic_error);
}

// Records its index when its frame is destroyed without having finished.
struct DropRecorder {
  std::mutex* mu;
  std::vector<int>* order;
  int index;
  bool finished = false;
  ~DropRecorder() {
    if (finished) return;
    std::lock_guard lk(*mu);
    order->push_back(index);
  }
};

TEST(PinnedTasks, ShutdownDropsQueuedPinnedTasksInQueueOrder) {
  constexpr int kTasks = 10;
  std::mutex mu;
  std::vector<int> order;
  std::atomic<int> started{0};
  {
    Runtime rt(workers(2));
    rt.spawn_detached([&]() -> Task<void> {
      for (int i = 0; i < kTasks; ++i) {
        (void)spawn_local([&mu, &order, &started, i]() -> Task<void> {  // dropping the handle detaches
          DropRecorder rec{&mu, &order, i};
          started.fetch_add(1);
          for (;;) co_await yield_now();  // always queued: the FIFO keeps its rotation
        });
      }
      co_return;
    });
    ASSERT_TRUE(eventually([&] { return started.load() == kTasks; }));
  }  // ~Runtime: the worker drops its queued pinned tasks, in queue order
  ASSERT_EQ(order.size(), static_cast<std::size_t>(kTasks));
  // Queue order of tasks that yield round-robin is a rotation of spawn order.
  for (int k = 1; k < kTasks; ++k) EXPECT_EQ(order[k], (order[0] + k) % kTasks) << "position " << k;
}

TEST(PinnedTasks, TheyShowInDiagnosticsWithTheirWorker) {
  RuntimeConfig cfg = workers(2);
  cfg.task_diagnostics = true;
  Runtime rt(cfg);
  Notify go;
  std::atomic<std::size_t> home{0};
  auto h = rt.spawn([&]() -> Task<void> {
    home = current_worker();
    co_await spawn_local([&]() -> Task<void> { co_await go.notified(); }, {TaskKind::kRequest, "pinned one"});
  });
  ASSERT_TRUE(eventually([&] { return go.waiter_count() == 1; }));
  bool found = false;
  for (const auto& t : rt.handle().scheduler()->tasks().snapshot(now_ns())) {
    if (t.name != "pinned one") continue;
    found = true;
    EXPECT_EQ(t.last_worker, home.load());
  }
  EXPECT_TRUE(found);
  go.notify_one();
  h.wait();
}

}  // namespace
}  // namespace sg::exec
