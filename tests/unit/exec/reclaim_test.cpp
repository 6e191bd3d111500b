// Idle memory reclaim: a worker that ran tasks and then had nothing to do for
// idle_memory_reclaim gives its wholly free slabs back, once per idle period, and has
// the blocking pool return malloc's free pages; a worker
// woken more often than that keeps them, unless what wakes it is background
// housekeeping; 0 turns it off.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "exec/coalesced_run.h"
#include "exec/notify.h"
#include "exec/reclaim.h"
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

// The fixed mmap threshold yields to an operator's own malloc setting.
TEST(MallocThreshold, IsFixedUnlessTheEnvironmentSetsIt) {
  ::unsetenv("MALLOC_MMAP_THRESHOLD_");
  ::unsetenv("GLIBC_TUNABLES");
  EXPECT_FALSE(malloc_threshold_set_by_environment());
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)  // ASan's mallopt sets nothing
  EXPECT_TRUE(fix_malloc_mmap_threshold());
#endif
  ::setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0", 1);  // another tunable: still ours
  EXPECT_FALSE(malloc_threshold_set_by_environment());
  ::setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=262144", 1);
  EXPECT_TRUE(malloc_threshold_set_by_environment());
  EXPECT_FALSE(fix_malloc_mmap_threshold());
  ::unsetenv("GLIBC_TUNABLES");
  ::setenv("MALLOC_MMAP_THRESHOLD_", "262144", 1);
  EXPECT_TRUE(malloc_threshold_set_by_environment());
  EXPECT_FALSE(fix_malloc_mmap_threshold());
  ::unsetenv("MALLOC_MMAP_THRESHOLD_");
}

// The case that matters, made deterministic: a request arrives while a walk is under
// way (past the requester's arena, say); the running caller walks once more for it.
TEST(CoalescedRun, ARequestDuringAWalkBringsOnOneMoreWalk) {
  CoalescedRun walks;
  std::atomic<int> started{0};
  std::atomic<bool> release{false};
  std::thread first([&] {
    walks.request([&] {
      started.fetch_add(1);
      while (!release.load()) std::this_thread::yield();
    });
  });
  while (started.load() == 0) std::this_thread::yield();
  int ran_here = 0;
  walks.request([&] { ++ran_here; });  // the first walk is running: handed over, not run here
  EXPECT_EQ(ran_here, 0);
  release.store(true);
  first.join();
  EXPECT_EQ(started.load(), 2) << "the request made during the first walk got no walk after it";
}

// Requests race running walks from 4 threads (a stress test for ThreadSanitizer too):
// walks never overlap, and the last request is followed by a walk that started after it.
TEST(CoalescedRun, EveryRequestIsFollowedByAWalkThatStartsAfterItAndWalksNeverOverlap) {
  CoalescedRun walks;
  std::atomic<uint64_t> made{0};          // requests made so far (each bumps it first)
  std::atomic<uint64_t> seen_at_start{0}; // `made` as the latest walk began
  std::atomic<int> walking{0};
  std::atomic<int> overlaps{0};
  std::atomic<uint64_t> runs{0};
  auto walk = [&] {
    if (walking.fetch_add(1) != 0) overlaps.fetch_add(1);
    seen_at_start.store(made.load());
    for (int i = 0; i < 200; ++i) std::atomic_signal_fence(std::memory_order_seq_cst);  // a walk takes time
    runs.fetch_add(1);
    walking.fetch_sub(1);
  };
  constexpr int kThreads = 4, kRequests = 5000;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&] {
      for (int i = 0; i < kRequests; ++i) {
        made.fetch_add(1);
        walks.request(walk);
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(seen_at_start.load(), made.load()) << "the last request went without a walk after it";
  EXPECT_LE(runs.load(), made.load());
  const uint64_t runs_before = runs.load();
  made.fetch_add(1);
  walks.request(walk);  // idle again: the next request walks at once, on the caller
  EXPECT_EQ(runs.load(), runs_before + 1);
  EXPECT_EQ(seen_at_start.load(), made.load());
}

}  // namespace
}  // namespace sg::exec
