// BurstTask (exec/burst_task.h): bursts run one after another with a frameless wait
// between them; the wait's result decides whether the next burst runs, the task waits again
// without one, or it ends; a wait completed
// at once still runs the next burst; cancellation while idle or mid-burst destroys the
// body once; an exception ends the task; a completion after shutdown drops it.
#include "exec/burst_task.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <stdexcept>

#include "exec/notify.h"
#include "exec/scheduler.h"
#include "../../support/eventually.h"
#include "../../support/workers.h"
#include "../../support/waker_slot.h"

namespace sg::exec {
namespace {

using sg::testing::eventually;
using sg::testing::WakerSlot;
using sg::testing::workers;

constexpr std::size_t kGoOn = 7;       // the wait result that starts the next burst
constexpr std::size_t kWaitAgain = 9;  // the one that arms the wait again, no burst

struct Log {
  std::atomic<int> bursts{0};
  std::atomic<int> wakes{0};
  std::atomic<int> ended{0};
  std::atomic<JoinableTask*> task{nullptr};
};

enum class Mode { kWaitForSlot, kReadyAtOnce, kThrowInSecondBurst, kNeverFinishSecondBurst };

struct ScriptedBody {
  WakerSlot& slot;
  Log& log;
  int max_bursts;
  Mode mode;
  Notify never;  // what a burst that must be cancelled waits for

  ScriptedBody(WakerSlot& s, Log& l, int max, Mode m) : slot(s), log(l), max_bursts(max), mode(m) {}
  ~ScriptedBody() {
    slot.take();  // a real body cancels its waits here; the Waker goes with it
    log.ended.fetch_add(1);
  }

  Task<bool> burst() { return run(); }
  Task<bool> run() {
    log.task.store(current_task());
    const int n = log.bursts.fetch_add(1) + 1;
    co_await yield_now();  // a burst suspends and resumes like any coroutine
    if (n == 2 && mode == Mode::kThrowInSecondBurst) throw std::runtime_error("boom");
    if (n == 2 && mode == Mode::kNeverFinishSecondBurst) co_await never.notified();
    co_return n < max_bursts;
  }
  void idle(Waker w) {
    if (mode == Mode::kReadyAtOnce) {
      std::move(w).wake({std::error_code{}, kGoOn});
      return;
    }
    slot.put(std::move(w));
  }
  BurstWake woken(const WaitResult& r) {
    log.wakes.fetch_add(1);
    if (r.value == kWaitAgain) return BurstWake::kWaitAgain;
    return r.value == kGoOn ? BurstWake::kBurst : BurstWake::kEnd;
  }
};

void spawn_test_body(Runtime& rt, WakerSlot& slot, Log& log, int max, Mode mode) {
  rt.block_on([&] { spawn_bursts<ScriptedBody>({TaskKind::kConnection, "test"}, slot, log, max, mode); });
}

TEST(BurstTask, BurstsRunOneAfterAnotherWithAWaitBetween) {
  Runtime rt(workers(2));
  WakerSlot slot;
  Log log;
  spawn_test_body(rt, slot, log, 3, Mode::kWaitForSlot);
  for (int i = 1; i <= 2; ++i) {
    ASSERT_TRUE(eventually([&] { return slot.armed(); })) << "burst " << i << " should have ended in a wait";
    EXPECT_EQ(log.bursts.load(), i);
    EXPECT_TRUE(slot.fire(kGoOn));
  }
  ASSERT_TRUE(eventually([&] { return log.ended.load() == 1; }));
  EXPECT_EQ(log.bursts.load(), 3);
  EXPECT_EQ(log.wakes.load(), 2);
  EXPECT_FALSE(slot.armed()) << "the last burst said stop: no wait armed";
  EXPECT_TRUE(eventually([&] { return rt.handle().scheduler()->live_tasks() == 0; }));
}

TEST(BurstTask, AWaitResultCanEndTheTask) {
  Runtime rt(workers(2));
  WakerSlot slot;
  Log log;
  spawn_test_body(rt, slot, log, 10, Mode::kWaitForSlot);
  ASSERT_TRUE(eventually([&] { return slot.armed(); }));
  EXPECT_TRUE(slot.fire(kGoOn + 1));
  ASSERT_TRUE(eventually([&] { return log.ended.load() == 1; }));
  EXPECT_EQ(log.bursts.load(), 1);
  EXPECT_EQ(log.wakes.load(), 1);
}

TEST(BurstTask, AWakeWithNothingToDoWaitsAgainWithoutABurst) {
  Runtime rt(workers(2));
  WakerSlot slot;
  Log log;
  spawn_test_body(rt, slot, log, 3, Mode::kWaitForSlot);
  ASSERT_TRUE(eventually([&] { return slot.armed(); }));
  for (int i = 1; i <= 3; ++i) {
    EXPECT_TRUE(slot.fire(kWaitAgain));
    ASSERT_TRUE(eventually([&] { return slot.armed() && log.wakes.load() == i; })) << "wake " << i
                                                                                   << " should wait again";
    EXPECT_EQ(log.bursts.load(), 1) << "no burst for a wake with nothing to do";
  }
  EXPECT_TRUE(slot.fire(kGoOn));
  ASSERT_TRUE(eventually([&] { return slot.armed() && log.bursts.load() == 2; }));
  EXPECT_TRUE(slot.fire(kGoOn));
  ASSERT_TRUE(eventually([&] { return log.ended.load() == 1; }));
  EXPECT_EQ(log.bursts.load(), 3);
  EXPECT_EQ(log.wakes.load(), 5);
  EXPECT_TRUE(eventually([&] { return rt.handle().scheduler()->live_tasks() == 0; }));
}

TEST(BurstTask, AWaitCompletedAtOnceStartsTheNextBurst) {
  Runtime rt(workers(1));
  WakerSlot slot;
  Log log;
  spawn_test_body(rt, slot, log, 5, Mode::kReadyAtOnce);
  ASSERT_TRUE(eventually([&] { return log.ended.load() == 1; }));
  EXPECT_EQ(log.bursts.load(), 5);
  EXPECT_EQ(log.wakes.load(), 4);
}

TEST(BurstTask, CancelledWhileIdleDestroysTheBodyOnce) {
  Runtime rt(workers(2));
  WakerSlot slot;
  Log log;
  spawn_test_body(rt, slot, log, 10, Mode::kWaitForSlot);
  ASSERT_TRUE(eventually([&] { return slot.armed(); }));
  cancel_task(log.task.load());
  ASSERT_TRUE(eventually([&] { return log.ended.load() == 1; }));
  EXPECT_FALSE(slot.armed()) << "the body's destructor dropped its wait";
  EXPECT_EQ(log.wakes.load(), 0);
  EXPECT_TRUE(eventually([&] { return rt.handle().scheduler()->live_tasks() == 0; }));
}

TEST(BurstTask, CancelledMidBurstDestroysTheBurstThenTheBody) {
  Runtime rt(workers(2));
  WakerSlot slot;
  Log log;
  spawn_test_body(rt, slot, log, 10, Mode::kNeverFinishSecondBurst);
  ASSERT_TRUE(eventually([&] { return slot.armed(); }));
  EXPECT_TRUE(slot.fire(kGoOn));
  ASSERT_TRUE(eventually([&] { return log.bursts.load() == 2; }));
  cancel_task(log.task.load());
  ASSERT_TRUE(eventually([&] { return log.ended.load() == 1; }));
  EXPECT_TRUE(eventually([&] { return rt.handle().scheduler()->live_tasks() == 0; }));
}

TEST(BurstTask, AnExceptionEndsTheTask) {
  Runtime rt(workers(2));
  WakerSlot slot;
  Log log;
  spawn_test_body(rt, slot, log, 10, Mode::kThrowInSecondBurst);
  ASSERT_TRUE(eventually([&] { return slot.armed(); }));
  EXPECT_TRUE(slot.fire(kGoOn));
  ASSERT_TRUE(eventually([&] { return log.ended.load() == 1; }));
  EXPECT_EQ(log.bursts.load(), 2);
}

TEST(BurstTask, AWaitCompletedAfterShutdownDestroysTheBody) {
  WakerSlot slot;
  Log log;
  Waker held;
  {
    Runtime rt(workers(2));
    spawn_test_body(rt, slot, log, 10, Mode::kWaitForSlot);
    ASSERT_TRUE(eventually([&] { return slot.armed(); }));
    held = slot.take();
  }
  // As with a suspended coroutine (Runtime.ShutdownDropsQueuedAndSuspendedTasks): the
  // runtime is gone, and the completion drops the task instead of running a burst.
  EXPECT_EQ(log.ended.load(), 0);
  std::move(held).wake({std::error_code{}, kGoOn});
  EXPECT_EQ(log.ended.load(), 1);
  EXPECT_EQ(log.bursts.load(), 1);
}

}  // namespace
}  // namespace sg::exec
