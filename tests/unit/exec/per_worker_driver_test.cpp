// A runtime whose workers each drive their own driver (the io_uring shape: a ring per
// worker): each driver is only ever parked and polled by its own worker's thread, every
// worker parks in its own driver (none waits on a condition variable behind another), a
// timer fires on the worker that armed it even while the others sleep, an earlier timer
// is not held up by a worker parked until a later one, and a worker busy with long polls
// still visits its driver; each driver is shut down once, by its own worker's thread.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <thread>
#include <utility>
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
    polls.fetch_add(1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(poll_takes_us.load());
    while (std::chrono::steady_clock::now() < until) {
    }
    return 0;
  }
  void unpark() override { sleep_.unpark(); }
  void shutdown() override {}

  std::atomic<int> parks{0};
  std::atomic<int> polls{0};
  std::atomic<int> other_threads{0};  // drives from a thread other than the first
  std::atomic<int> poll_takes_us{0};  // how long a non-blocking poll spins

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

// Polls `n` times (yielding between, so the queue never runs dry and the worker neither
// parks nor flushes), each poll spinning for `each`; returns the driver polls the worker
// made meanwhile.
int driver_polls_during(Runtime& rt, RecordingDriver& d, int n, std::chrono::microseconds each) {
  auto r = rt.block_on([&]() -> Task<int> {
    const int before = d.polls.load();
    for (int i = 0; i < n; ++i) {
      const auto until = Clock::now() + each;
      while (Clock::now() < until) {
      }
      co_await yield_now();
    }
    co_return d.polls.load() - before;
  });
  return r.value_or(-1);
}

TEST(PerWorkerDrivers, AWorkerBusyWithLongPollsStillVisitsItsDriver) {
  // A completion on this worker's driver (a new connection, a client's TLS flight), or a
  // send a poll queued there, would otherwise wait for event_interval ticks: 30 polls of
  // 300 us (a TLS handshake each) are 9 ms, and with the default interval of 61, no visit.
  Drivers d;
  RuntimeConfig cfg = workers(1);
  cfg.poll_timing = true;
  Runtime rt(cfg, d.factory());
  const int long_visits = driver_polls_during(rt, *d.all[0], 30, 300us);
  EXPECT_GE(long_visits, 25) << "one visit is due after each poll of 300 us";
  EXPECT_TRUE(eventually([&] { return rt.stats().total().overdue_driver_polls >= 25; }));
  // Short polls keep the one visit per event_interval ticks, however long their batch.
  // (A few may come from polls the OS preempted: wall time counts.)
  const int short_visits = driver_polls_during(rt, *d.all[0], 50, 0us);
  EXPECT_LT(short_visits, 10);
}

TEST(PerWorkerDrivers, AVisitsTimeIsNotCountedToTheNextPoll) {
  // A driver poll that takes 150 us (submitting sends runs them in the kernel): the polls
  // after a visit are short, and must not be measured from before it, or each would pass
  // the threshold in turn and make a visit of its own.
  Drivers d;
  RuntimeConfig cfg = workers(1);
  cfg.poll_timing = true;
  Runtime rt(cfg, d.factory());
  d.all[0]->poll_takes_us = 150;
  auto r = rt.block_on([&]() -> Task<bool> {
    const auto until = Clock::now() + 300us;
    while (Clock::now() < until) {
    }
    for (int i = 0; i < 20; ++i) co_await yield_now();
    co_return true;
  });
  ASSERT_TRUE(r.has_value());
  // (Counters are published when the worker parks, which it does once the task is done.)
  EXPECT_TRUE(eventually([&] { return rt.stats().total().overdue_driver_polls >= 1; }));
  std::this_thread::sleep_for(20ms);
  EXPECT_LE(rt.stats().total().overdue_driver_polls, 3u) << "short polls after a visit counted its time";
}

TEST(PerWorkerDrivers, TheVisitAfterALongPollCanBeTurnedOff) {
  Drivers d;
  RuntimeConfig cfg = workers(1);
  cfg.poll_timing = true;
  cfg.driver_visit_after_poll = 0ns;
  Runtime rt(cfg, d.factory());
  EXPECT_LE(driver_polls_during(rt, *d.all[0], 30, 300us), 1);  // (an event_interval tick may fall in)
  EXPECT_EQ(rt.stats().total().overdue_driver_polls, 0u);
}

// A driver that batches submissions, as io_uring does: an operation (FakeIo) queues its
// waker on the driver of the worker it runs on, and the completion is ready by the time
// the worker flushes (flush() says so); poll() and park() both complete what is ready.
class ReadyAtFlushDriver final : public Driver {
 public:
  uint32_t park(uint32_t max, std::optional<std::chrono::milliseconds> timeout) override {
    parks.fetch_add(1);
    if (const uint32_t n = complete(max)) return n;
    return sleep_.park(max, timeout);
  }
  uint32_t poll(uint32_t max) override {
    polls.fetch_add(1);
    return complete(max);
  }
  void unpark() override { sleep_.unpark(); }
  bool visited_when_idle() const override { return true; }
  bool flush() override { return !ready_.empty(); }
  void shutdown() override {}
  void submit(Waker w) { ready_.push_back(std::move(w)); }  // only from its worker's thread

  std::atomic<int> parks{0};
  std::atomic<int> polls{0};

 private:
  uint32_t complete(uint32_t max) {
    uint32_t n = 0;
    for (; n < max && !ready_.empty(); ++n) {
      Waker w = std::move(ready_.front());
      ready_.erase(ready_.begin());
      std::move(w).wake();
    }
    return n;
  }
  std::vector<Waker> ready_;
  SleepDriver sleep_;
};

std::vector<ReadyAtFlushDriver*> ready_at_flush_drivers;

struct FakeIo {
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) { ready_at_flush_drivers[tl_ctx.worker_index]->submit(arm_wait(h)); }
  void await_resume() const noexcept {}
};

// Completions already on a worker's own driver when its queue runs dry are taken with a
// poll, before stealing and without parking: a park that returns at once still goes
// through the idle protocol (shared state and a mutex), and a steal would take another
// worker's tasks while our own wait.
TEST(PerWorkerDrivers, CompletionsReadyAtTheFlushArePolledWithoutParking) {
  ready_at_flush_drivers.clear();
  Runtime rt(workers(1), [](std::size_t) {
    auto d = std::make_unique<ReadyAtFlushDriver>();
    ready_at_flush_drivers.push_back(d.get());
    return d;
  });
  ReadyAtFlushDriver& d = *ready_at_flush_drivers[0];
  auto r = rt.block_on([&]() -> Task<std::pair<int, int>> {
    const int parks = d.parks.load(), polls = d.polls.load();
    for (int i = 0; i < 1000; ++i) co_await FakeIo{};
    co_return std::pair{d.parks.load() - parks, d.polls.load() - polls};
  });
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->first, 0) << "parks while every completion was ready at the flush";
  EXPECT_GE(r->second, 1000);
}

// Between two batches of its ring's completions, a worker gives up its CPU once (after
// the flush, before taking them: RuntimeConfig::yield_between_batches), so that a thread
// waiting for that CPU runs at batch rather than tick granularity; never where the ring
// held nothing (the worker goes on to sleep), and not at all when turned off.
// `ios` completions in a row on one worker; returns its yields once its counters show
// at least `at_least` of them (published when it parks, after the task is done).
int batch_yields_for(bool yield_between_batches, int ios, uint64_t at_least) {
  ready_at_flush_drivers.clear();
  RuntimeConfig cfg = workers(1);
  cfg.yield_between_batches = yield_between_batches;
  Runtime rt(cfg, [](std::size_t) {
    auto d = std::make_unique<ReadyAtFlushDriver>();
    ready_at_flush_drivers.push_back(d.get());
    return d;
  });
  auto r = rt.block_on([&]() -> Task<bool> {
    for (int i = 0; i < ios; ++i) co_await FakeIo{};
    co_return true;
  });
  if (!r.has_value()) return -1;
  const bool published = eventually([&] {
    const WorkerCounters t = rt.stats().total();
    return t.polls >= static_cast<uint64_t>(ios) && t.batch_yields >= at_least;
  });
  return published ? static_cast<int>(rt.stats().total().batch_yields) : -1;
}

TEST(PerWorkerDrivers, AWorkerYieldsItsCpuBetweenBatchesOfItsRing) {
  // One per batch that left completions on the ring; the periodic driver poll inside a
  // batch (every event_interval ticks) takes a few of them instead.
  const int yields = batch_yields_for(true, 1000, 900);
  EXPECT_GE(yields, 900);
  EXPECT_LE(yields, 1000);
  EXPECT_EQ(batch_yields_for(true, 0, 0), 0) << "a worker whose ring holds nothing goes to sleep without a yield";
  EXPECT_EQ(batch_yields_for(false, 1000, 0), 0);
}

TEST(PerWorkerDrivers, ADriverThatDoesNotBatchSubmissionsNeverYields) {
  // Asio's reactor (epoll) is shared by the workers: any worker takes any socket's events.
  Drivers d;
  Runtime rt(workers(2), d.factory());
  auto r = rt.block_on([&]() -> Task<bool> {
    for (int i = 0; i < 200; ++i) co_await yield_now();
    co_await sleep_for(5ms);
    co_return true;
  });
  ASSERT_TRUE(r.has_value());
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(rt.stats().total().batch_yields, 0u);
}

// A ring that says completions are ready at every flush and then dispatches nothing
// (io_uring's task-work flag, left set with no work behind it: io/uring.cpp, flush) must
// not keep its worker polling: the worker goes on to park, and sleeps there until its
// timer is due.
class AlwaysReadyDriver final : public Driver {
 public:
  uint32_t park(uint32_t max, std::optional<std::chrono::milliseconds> timeout) override {
    parks.fetch_add(1);
    return sleep_.park(max, timeout);
  }
  uint32_t poll(uint32_t) override {
    polls.fetch_add(1);
    return 0;
  }
  void unpark() override { sleep_.unpark(); }
  bool visited_when_idle() const override { return true; }
  bool flush() override { return true; }
  void shutdown() override {}

  std::atomic<int> parks{0};
  std::atomic<int> polls{0};

 private:
  SleepDriver sleep_;
};

TEST(PerWorkerDrivers, ARingReadyWithNothingToDispatchLetsItsWorkerSleep) {
  AlwaysReadyDriver* driver = nullptr;
  Runtime rt(workers(1), [&](std::size_t) {
    auto d = std::make_unique<AlwaysReadyDriver>();
    driver = d.get();
    return d;
  });
  auto polls = rt.block_on([&]() -> Task<int> {
    const int before = driver->polls.load();
    co_await sleep_for(50ms);
    co_return driver->polls.load() - before;
  });
  ASSERT_TRUE(polls.has_value());
  // One visit per wake-up at most (the sleep's park, and any maintenance); a worker that
  // looped on the ring's word would poll it millions of times in 50 ms.
  EXPECT_LE(*polls, 20);
  EXPECT_GE(driver->parks.load(), 1);
}

// Where each driver was attached (its worker's thread) and where it was shut down, kept
// outside the runtime, which destroys the drivers.
struct ShutdownSeen {
  std::atomic<std::thread::id> attached{};
  std::atomic<std::thread::id> shut_down{};
  std::atomic<int> shutdowns{0};
};

class ShutdownRecorder final : public Driver {
 public:
  explicit ShutdownRecorder(ShutdownSeen& seen) : seen_(seen) {}
  uint32_t park(uint32_t max, std::optional<std::chrono::milliseconds> timeout) override {
    return sleep_.park(max, timeout);
  }
  uint32_t poll(uint32_t /*max*/) override { return 0; }
  void unpark() override { sleep_.unpark(); }
  void attach() override { seen_.attached.store(std::this_thread::get_id()); }
  void shutdown() override {
    seen_.shut_down.store(std::this_thread::get_id());
    seen_.shutdowns.fetch_add(1);
  }

 private:
  ShutdownSeen& seen_;
  SleepDriver sleep_;
};

// An io_uring ring takes submissions only from the thread that drives it (DEFER_TASKRUN):
// the runtime shuts each worker's driver down on that worker's thread, once.
TEST(PerWorkerDrivers, EachDriverIsShutDownOnceByItsOwnWorkersThread) {
  std::array<ShutdownSeen, 3> seen;
  {
    Runtime rt(workers(3), [&seen](std::size_t i) { return std::make_unique<ShutdownRecorder>(seen[i]); });
    std::vector<JoinHandle<void>> hs;
    for (int i = 0; i < 30; ++i) {
      hs.push_back(rt.spawn([]() -> Task<void> { co_await sleep_for(1ms); }));
    }
    for (auto& h : hs) h.wait();
    // One task still sleeps as the runtime goes: dropped by the shutdown.
    rt.spawn([]() -> Task<void> { co_await sleep_for(1h); }).detach();
  }
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].shutdowns.load(), 1) << "driver " << i;
    EXPECT_NE(seen[i].attached.load(), std::thread::id{}) << "driver " << i;
    EXPECT_EQ(seen[i].shut_down.load(), seen[i].attached.load()) << "driver " << i << " was shut down off its thread";
  }
}

}  // namespace
}  // namespace sg::exec
