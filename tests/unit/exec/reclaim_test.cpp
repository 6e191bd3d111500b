// Idle memory reclaim: a worker that ran tasks and then had nothing to do for
// idle_memory_reclaim gives its wholly free slabs back, once per idle period, and has
// the blocking pool return malloc's free pages; a worker
// woken more often than that keeps them, unless what wakes it is background
// housekeeping; 0 turns it off.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "exec/notify.h"
#include "exec/runtime.h"
#include "exec/timers.h"
#include "../../support/eventually.h"
#include "../../support/workers.h"

namespace sg::exec {
namespace {

using namespace std::chrono_literals;
using sg::testing::eventually;

// A task whose frame (about 3 KiB) lives until `go`.
Task<void> holder(Notify& go, std::atomic<int>& done) {
  std::array<char, 3000> scratch{};
  scratch[0] = 1;
  co_await go.notified();
  done.fetch_add(scratch[0]);
}

// 200 frames allocated on the worker (spawned by a task, so from the worker's cache),
// then all freed there.
void spike(Runtime& rt) {
  Notify go;
  std::atomic<int> done{0};
  rt.spawn([&]() -> Task<void> {
      std::vector<JoinHandle<void>> hs;
      for (int i = 0; i < 200; ++i) hs.push_back(spawn(holder(go, done)));
      while (go.waiter_count() < 200) co_await sleep_for(1ms);
      for (int i = 0; i < 200; ++i) go.notify_one();
      for (auto& h : hs) co_await h;
    }).wait();
  ASSERT_EQ(done.load(), 200);
}

TEST(IdleReclaim, AnIdleWorkerGivesFreeSlabsBackOncePerIdlePeriod) {
  RuntimeConfig cfg = sg::testing::workers(1);
  cfg.idle_memory_reclaim = 50ms;
  Runtime rt(cfg);
  spike(rt);
  ASSERT_TRUE(eventually([&] { return rt.stats().total().memory_reclaims == 1; }));
  // The page release (malloc_trim, milliseconds on a large heap) ran on the blocking pool.
  EXPECT_TRUE(eventually([&] { return rt.stats().blocking_threads >= 1; }));
  if (kTaskAllocPooled) {
    EXPECT_GE(rt.stats().total().memory_reclaimed_bytes, 200u * 3000u);
  }
  // Still idle: no second reclaim (the worker now sleeps without a limit).
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(rt.stats().total().memory_reclaims, 1u);
  // New work, then idle again: one more.
  spike(rt);
  ASSERT_TRUE(eventually([&] { return rt.stats().total().memory_reclaims == 2; }));
}

TEST(IdleReclaim, AWorkerWokenMoreOftenThanThePeriodKeepsItsMemory) {
  RuntimeConfig cfg = sg::testing::workers(1);
  cfg.idle_memory_reclaim = 400ms;
  Runtime rt(cfg);
  spike(rt);
  // A task that wakes every 10 ms for 800 ms: the worker never idles 400 ms.
  auto ticker = rt.spawn([]() -> Task<void> {
    for (int i = 0; i < 80; ++i) co_await sleep_for(10ms);
  });
  ticker.wait();
  EXPECT_EQ(rt.stats().total().memory_reclaims, 0u);
  ASSERT_TRUE(eventually([&] { return rt.stats().total().memory_reclaims == 1; }));
}

TEST(IdleReclaim, BackgroundTasksDoNotKeepAWorkerBusy) {
  RuntimeConfig cfg = sg::testing::workers(1);
  cfg.idle_memory_reclaim = 100ms;
  cfg.poll_timing = true;  // what tells background polls apart (the gateway always has it)
  Runtime rt(cfg);
  spike(rt);
  // A pool reaper's rhythm, faster: housekeeping every 10 ms does not end the quiet period.
  auto reaper = rt.spawn([]() -> Task<void> {
    for (;;) co_await sleep_for(10ms);
  }, {TaskKind::kMaintenance, "reaper"});
  ASSERT_TRUE(eventually([&] { return rt.stats().total().memory_reclaims == 1; }));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(rt.stats().total().memory_reclaims, 1u) << "background polls alone are not new work";
  reaper.cancel();
}

TEST(IdleReclaim, ZeroTurnsItOff) {
  RuntimeConfig cfg = sg::testing::workers(1);
  cfg.idle_memory_reclaim = 0ms;
  Runtime rt(cfg);
  spike(rt);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(rt.stats().total().memory_reclaims, 0u);
}

}  // namespace
}  // namespace sg::exec
