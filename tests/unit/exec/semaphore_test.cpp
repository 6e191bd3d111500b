// Admission semaphore: FIFO fairness, adaptive LIFO under a standing queue (newest served
// first, a full queue pushes out its oldest), bounded queue, timeouts, cancellation while
// waiting, permits never lost (also when a grant races a cancellation or a timeout).
// Timeouts are driven by hand through WaitTimeout stand-ins, so nothing depends on
// wall-clock time.
#include "exec/semaphore.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "exec/runtime.h"
#include "../../support/eventually.h"

namespace sg::exec {
namespace {

using namespace std::chrono_literals;

using sg::testing::eventually;

// A timeout that fires when the test says so.
class ManualTimeout final : public WaitTimeout {
 public:
  void arm(Waker w) override {
    std::lock_guard lk(mu_);
    waker_ = std::move(w);
    armed_.store(true);
  }
  void cancel() override { cancelled_.store(true); }
  void fire() {
    Waker w;
    {
      std::lock_guard lk(mu_);
      w = std::move(waker_);
    }
    if (w) std::move(w).wake({{}, 1});
  }
  bool armed() const { return armed_.load(); }

 private:
  std::mutex mu_;
  Waker waker_;
  std::atomic<bool> armed_{false};
  std::atomic<bool> cancelled_{false};
};

RuntimeConfig one_worker() {
  RuntimeConfig c;
  c.worker_threads = 1;
  return c;
}

TEST(Semaphore, TryAcquireAndRelease) {
  Semaphore s(2, 10);
  EXPECT_TRUE(s.try_acquire());
  EXPECT_TRUE(s.try_acquire());
  EXPECT_FALSE(s.try_acquire());
  s.release();
  EXPECT_TRUE(s.try_acquire());
  {
    Semaphore::Permit p(&s);  // adopts the permit just taken
  }
  EXPECT_EQ(s.available(), 1u);
}

TEST(Semaphore, WaitersAreServedInArrivalOrder) {
  Runtime rt(one_worker());
  Semaphore s(1, 100);
  ASSERT_TRUE(s.try_acquire());
  std::mutex mu;
  std::vector<int> order;
  std::vector<JoinHandle<void>> hs;
  for (int i = 0; i < 5; ++i) {
    hs.push_back(rt.spawn([&, i]() -> Task<void> {
      AcquireStatus st = co_await s.acquire();
      EXPECT_EQ(st, AcquireStatus::kAcquired);
      {
        std::lock_guard lk(mu);
        order.push_back(i);
      }
      s.release();
    }));
    ASSERT_TRUE(eventually([&] { return s.waiting() == static_cast<std::size_t>(i + 1); }));
  }
  s.release();
  for (auto& h : hs) EXPECT_TRUE(h.wait());
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(s.available(), 1u);
}

TEST(Semaphore, ArrivalsCannotBargePastTheQueue) {
  Runtime rt(one_worker());
  Semaphore s(1, 100);
  ASSERT_TRUE(s.try_acquire());
  auto waiter = rt.spawn([&]() -> Task<int> { co_return static_cast<int>(co_await s.acquire()); });
  ASSERT_TRUE(eventually([&] { return s.waiting() == 1; }));
  s.release();                   // handed to the waiter, not to the pool
  EXPECT_FALSE(s.try_acquire());  // so a newcomer finds none
  EXPECT_EQ(waiter.wait(), static_cast<int>(AcquireStatus::kAcquired));
  s.release();
  EXPECT_EQ(s.available(), 1u);
}

TEST(Semaphore, FullQueueRejectsAtOnce) {
  Runtime rt(one_worker());
  Semaphore s(1, 2);
  ASSERT_TRUE(s.try_acquire());
  std::vector<JoinHandle<int>> queued;
  for (int i = 0; i < 2; ++i) {
    queued.push_back(rt.spawn([&]() -> Task<int> { co_return static_cast<int>(co_await s.acquire()); }));
  }
  ASSERT_TRUE(eventually([&] { return s.waiting() == 2; }));
  auto third = rt.spawn([&]() -> Task<int> { co_return static_cast<int>(co_await s.acquire()); });
  EXPECT_EQ(third.wait(), static_cast<int>(AcquireStatus::kQueueFull));
  s.release();
  EXPECT_EQ(queued[0].wait(), static_cast<int>(AcquireStatus::kAcquired));
  s.release();
  EXPECT_EQ(queued[1].wait(), static_cast<int>(AcquireStatus::kAcquired));
  s.release();
  EXPECT_EQ(s.available(), 1u);
}

// Spawns a waiter per id and records the order in which they get the permit.
struct OrderProbe {
  OrderProbe(Runtime& r, Semaphore& sem) : rt(r), s(sem) {}
  Runtime& rt;
  Semaphore& s;
  std::mutex mu;
  std::vector<int> order;
  std::vector<JoinHandle<int>> hs;

  void queue(int id) {
    std::size_t before = s.waiting();
    hs.push_back(rt.spawn([this, id]() -> Task<int> {
      AcquireStatus st = co_await s.acquire();
      if (st == AcquireStatus::kAcquired) {
        {
          std::lock_guard lk(mu);
          order.push_back(id);
        }
        s.release();
      }
      co_return static_cast<int>(st);
    }));
    ASSERT_TRUE(eventually([&] { return s.waiting() == before + 1; }));
  }
};

TEST(Semaphore, AdaptiveLifoStaysFifoWhileTheQueueDrainsQuickly) {
  Runtime rt(one_worker());
  Semaphore s(1, 100);
  s.set_lifo_after(std::chrono::hours(1));  // nobody has waited that long
  ASSERT_TRUE(s.try_acquire());
  OrderProbe p(rt, s);
  for (int i = 0; i < 4; ++i) p.queue(i);
  s.release();
  for (auto& h : p.hs) EXPECT_EQ(h.wait(), static_cast<int>(AcquireStatus::kAcquired));
  EXPECT_EQ(p.order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(s.available(), 1u);
}

TEST(Semaphore, AdaptiveLifoServesTheNewestOnceTheQueueStands) {
  Runtime rt(one_worker());
  Semaphore s(1, 100);
  s.set_lifo_after(std::chrono::nanoseconds(1));  // every queue is standing by release time
  ASSERT_TRUE(s.try_acquire());
  OrderProbe p(rt, s);
  for (int i = 0; i < 4; ++i) p.queue(i);
  s.release();  // to 3, whose release goes to 2, ...
  for (auto& h : p.hs) EXPECT_EQ(h.wait(), static_cast<int>(AcquireStatus::kAcquired));
  EXPECT_EQ(p.order, (std::vector<int>{3, 2, 1, 0}));
  EXPECT_EQ(s.available(), 1u);
}

TEST(Semaphore, FullStandingQueuePushesOutItsOldestWaiter) {
  Runtime rt(one_worker());
  Semaphore s(1, 2);
  s.set_lifo_after(std::chrono::nanoseconds(1));
  ASSERT_TRUE(s.try_acquire());
  OrderProbe p(rt, s);
  ManualTimeout to;  // the displaced waiter's timeout must be cancelled, not left armed
  p.hs.push_back(rt.spawn([&]() -> Task<int> { co_return static_cast<int>(co_await s.acquire(&to)); }));
  ASSERT_TRUE(eventually([&] { return s.waiting() == 1 && to.armed(); }));
  p.queue(1);
  // The queue is full; a third arrival pushes out the oldest instead of being refused.
  auto third = rt.spawn([&]() -> Task<int> {
    AcquireStatus st = co_await s.acquire();
    if (st == AcquireStatus::kAcquired) s.release();
    co_return static_cast<int>(st);
  });
  EXPECT_EQ(p.hs[0].wait(), static_cast<int>(AcquireStatus::kDisplaced));
  EXPECT_TRUE(eventually([&] { return s.waiting() == 2; }));
  s.release();
  EXPECT_EQ(third.wait(), static_cast<int>(AcquireStatus::kAcquired));
  EXPECT_EQ(p.hs[1].wait(), static_cast<int>(AcquireStatus::kAcquired));
  EXPECT_EQ(s.available(), 1u);
  EXPECT_EQ(s.waiting(), 0u);
}

TEST(Semaphore, FifoQueueFullRefusesTheNewcomerEvenWithAdaptiveLifoOn) {
  Runtime rt(one_worker());
  Semaphore s(1, 1);
  s.set_lifo_after(std::chrono::hours(1));  // not standing: a full queue refuses as FIFO does
  ASSERT_TRUE(s.try_acquire());
  OrderProbe p(rt, s);
  p.queue(0);
  auto second = rt.spawn([&]() -> Task<int> { co_return static_cast<int>(co_await s.acquire()); });
  EXPECT_EQ(second.wait(), static_cast<int>(AcquireStatus::kQueueFull));
  s.release();
  EXPECT_EQ(p.hs[0].wait(), static_cast<int>(AcquireStatus::kAcquired));
  EXPECT_EQ(s.available(), 1u);
}

TEST(Semaphore, TimeoutLeavesTheQueue) {
  Runtime rt(one_worker());
  Semaphore s(1, 10);
  ASSERT_TRUE(s.try_acquire());
  ManualTimeout to;
  auto h = rt.spawn([&]() -> Task<int> { co_return static_cast<int>(co_await s.acquire(&to)); });
  ASSERT_TRUE(eventually([&] { return s.waiting() == 1 && to.armed(); }));
  to.fire();
  EXPECT_EQ(h.wait(), static_cast<int>(AcquireStatus::kTimeout));
  EXPECT_EQ(s.waiting(), 0u);
  s.release();  // nobody waits any more: the permit returns to the pool
  EXPECT_EQ(s.available(), 1u);
}

TEST(Semaphore, CancelledWaiterLeavesTheQueueAndLosesNoPermit) {
  Runtime rt(one_worker());
  Semaphore s(1, 10);
  ASSERT_TRUE(s.try_acquire());
  std::atomic<bool> next_got_it{false};
  auto doomed = rt.spawn([&]() -> Task<void> {
    co_await s.acquire();
    ADD_FAILURE() << "a cancelled waiter must never run on";
  });
  ASSERT_TRUE(eventually([&] { return s.waiting() == 1; }));
  auto next = rt.spawn([&]() -> Task<void> {
    if (co_await s.acquire() == AcquireStatus::kAcquired) next_got_it.store(true);
    s.release();
  });
  ASSERT_TRUE(eventually([&] { return s.waiting() == 2; }));
  doomed.cancel();
  EXPECT_FALSE(doomed.wait());
  EXPECT_EQ(s.waiting(), 1u);
  s.release();
  EXPECT_TRUE(next.wait());
  EXPECT_TRUE(next_got_it.load());
  EXPECT_EQ(s.available(), 1u);
}

TEST(Semaphore, PermitGrantedToACancelledWaiterIsGivenBack) {
  // Grant and cancellation race: release() hands the permit to a waiter whose task is
  // cancelled before it resumes. The awaiter's destructor must return that permit.
  for (int round = 0; round < 200; ++round) {
    Runtime rt(one_worker());
    Semaphore s(1, 10);
    ASSERT_TRUE(s.try_acquire());
    auto h = rt.spawn([&]() -> Task<void> {
      if (co_await s.acquire() == AcquireStatus::kAcquired) s.release();
    });
    ASSERT_TRUE(eventually([&] { return s.waiting() == 1; }));
    std::thread t1([&] { h.cancel(); });
    std::thread t2([&] { s.release(); });
    t1.join();
    t2.join();
    h.wait();
    ASSERT_EQ(s.available(), 1u) << "round " << round;
    ASSERT_EQ(s.waiting(), 0u);
  }
}

// Timeouts that fire from another thread at any moment, racing grants: some fire inside
// arm() itself (an expired deadline), the rest whenever the firing thread gets to them.
// Nothing points back at the timeout object (it lives in the waiting coroutine's frame);
// a waker that fires after its wait is over only drops its task reference.
class RacingTimeouts {
 public:
  class Timeout final : public WaitTimeout {
   public:
    Timeout(RacingTimeouts& owner, bool expired) : owner_(owner), expired_(expired) {}
    void arm(Waker w) override {
      if (expired_) {
        std::move(w).wake({{}, 1});
        return;
      }
      std::lock_guard lk(owner_.mu_);
      owner_.armed_.push_back(std::move(w));
    }
    void cancel() override {}

   private:
    RacingTimeouts& owner_;
    bool expired_;
  };

  RacingTimeouts()
      : firer_([this] {
          while (!stop_.load()) {
            fire_one();
            std::this_thread::sleep_for(20us);
          }
        }) {}
  ~RacingTimeouts() {
    stop_.store(true);
    firer_.join();
    while (fire_one()) {
    }
  }

 private:
  bool fire_one() {
    Waker w;
    {
      std::lock_guard lk(mu_);
      if (armed_.empty()) return false;
      w = std::move(armed_.back());
      armed_.pop_back();
    }
    std::move(w).wake({{}, 1});
    return true;
  }
  std::mutex mu_;
  std::vector<Waker> armed_;
  std::atomic<bool> stop_{false};
  std::thread firer_;
};

class SemaphoreStress : public ::testing::TestWithParam<bool> {};

// Many tasks on 3 workers, some cancelled, some with timeouts that race the grants; in the
// LIFO variant a small standing queue also pushes waiters out. Whatever happens, the
// permits are all back at the end.
TEST_P(SemaphoreStress, ManyTasksNoPermitLost) {
  const bool lifo = GetParam();
  RuntimeConfig cfg;
  cfg.worker_threads = 3;
  Runtime rt(cfg);
  constexpr int kPermits = 4, kTasks = 400;
  Semaphore s(kPermits, lifo ? 8 : 64);
  if (lifo) s.set_lifo_after(std::chrono::nanoseconds(1));
  std::atomic<int> inside{0}, max_inside{0}, acquired{0}, rejected{0}, displaced{0}, timed_out{0};
  RacingTimeouts timeouts;  // after rt: its leftover wakers are dropped while the runtime exists
  // All permits are held until a timeout has won (tasks are queued behind them), then
  // released into the race; without this the tasks may never have to wait at all.
  std::vector<Semaphore::Permit> held;
  for (int i = 0; i < kPermits; ++i) {
    ASSERT_TRUE(s.try_acquire());
    held.emplace_back(&s);
  }
  std::vector<JoinHandle<void>> hs;
  for (int i = 0; i < kTasks; ++i) {
    hs.push_back(rt.spawn([&, i]() -> Task<void> {
      std::optional<RacingTimeouts::Timeout> to;
      if (i % 3 != 0) to.emplace(timeouts, /*expired=*/i % 3 == 1);
      AcquireStatus st = co_await s.acquire(to ? &*to : nullptr);
      if (st != AcquireStatus::kAcquired) {
        rejected.fetch_add(1);
        if (st == AcquireStatus::kDisplaced) displaced.fetch_add(1);
        if (st == AcquireStatus::kTimeout) timed_out.fetch_add(1);
        co_return;
      }
      // RAII: a task cancelled while it holds the permit (suspended in yield_now) must
      // give it back when its frame is dropped.
      Semaphore::Permit permit(&s);
      acquired.fetch_add(1);
      int now = inside.fetch_add(1) + 1;
      int m = max_inside.load();
      while (now > m && !max_inside.compare_exchange_weak(m, now)) {
      }
      struct Leave {
        std::atomic<int>& n;
        ~Leave() { n.fetch_sub(1); }
      } leave{inside};
      co_await yield_now();
    }));
    if (i % 7 == 0) hs.back().cancel();
  }
  EXPECT_TRUE(eventually([&] { return timed_out.load() > 0; })) << "no queued waiter ever timed out";
  held.clear();
  for (auto& h : hs) h.wait();
  EXPECT_LE(max_inside.load(), kPermits);
  EXPECT_GT(acquired.load(), 0);
  if (lifo) EXPECT_GT(displaced.load(), 0) << "the standing queue never pushed anyone out";
  else EXPECT_EQ(displaced.load(), 0);
  EXPECT_EQ(s.available(), static_cast<std::size_t>(kPermits));
  EXPECT_EQ(s.waiting(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Order, SemaphoreStress, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "AdaptiveLifo" : "Fifo"; });

}  // namespace
}  // namespace sg::exec
