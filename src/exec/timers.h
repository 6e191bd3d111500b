// Timers: every deadline of a runtime (socket timeouts, sleeps, admission waits) on timing
// wheels (timer_wheel.h) driven by the worker that holds the I/O driver, as Tokio's time
// driver wraps its I/O driver. Asio's timer queue is not involved.
//
// Sharding: one wheel per worker, each under its own lock, so workers arming and
// cancelling timers for their own connections do not contend; an entry remembers its
// shard (a task stolen to another worker cancels on the shard it armed on).
//
// Park groups: the shards a driver's holder advances before and after it parks (Parker),
// and a busy worker when it polls the driver (every event_interval ticks). With one driver
// shared by all workers (the reactor) there is one group of every shard. With a driver per
// worker (io_uring: a ring each) each shard is its own group, advanced by its worker
// alone: a timer armed on a worker fires there, like the I/O it usually bounds. (Arms from
// threads that are not workers go to shard 0.)
//
// Firing: under the shard lock the entry is unlinked and its waker moved out; the wakers
// are woken after the lock is released (waking can run task-drop code at shutdown, which
// must not find the lock held). An entry's owner cancels under the same lock, so once
// cancel() returns no firing can touch the entry, and a waker that fires after the task
// stopped waiting finds its wait generation gone (exec::Waker) and does nothing.
//
// Parked driver: a holder that parks publishes when it will wake (its group's
// park_deadline). An arm earlier than that unparks the group's driver so it parks again
// with the shorter timeout. The
// arm's check of park_deadline comes after its insert (under the shard lock) and the
// holder's computation of its timeout comes after it published park_deadline (seq_cst
// both): either the holder's scan of next_due sees the new entry, or the arm sees the
// deadline.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "exec/coro.h"
#include "exec/spin_lock.h"
#include "exec/timer_wheel.h"

namespace sg::exec {

class Driver;
using Clock = std::chrono::steady_clock;

class Timers;

// One armable deadline, living in its owner (an awaiter). Armed at most once at a time;
// the owner must cancel() (or let the destructor do it) before reusing or freeing it.
// Privately a TimerNode, the wheel's link (Timers converts back from the node).
class TimerEntry : private TimerNode {
 public:
  TimerEntry() = default;
  TimerEntry(const TimerEntry&) = delete;
  TimerEntry& operator=(const TimerEntry&) = delete;
  ~TimerEntry() { cancel(); }

  // Completes `w`'s wait with WaitResult{{}, tag} at `at`, taking `w` (tag < 2^16). False
  // when `at` is already due (or the runtime shut down): nothing is armed and `w` stays
  // with the caller, who decides what that means (usually: complete the wait now).
  bool arm(Timers& timers, Clock::time_point at, Waker& w, std::size_t tag);
  // Stops the timer if it has not fired. Safe from any thread, any number of times.
  void cancel();
  bool armed() const { return timers_ != nullptr; }

 private:
  friend class Timers;
  TimerNode& node() { return *this; }
  static TimerEntry& of(TimerNode* n) { return static_cast<TimerEntry&>(*n); }

  // These two fill the node's tail padding (sizeof below): every wait with a deadline
  // carries an entry, an idle connection's task among them (proxy/session.cpp). A tag
  // says which of a wait's raced operations fired (a few values); shards are workers
  // (at most 1,024).
  uint16_t tag_ = 0;
  uint16_t shard_ = 0;
  Waker waker_;
  Timers* timers_ = nullptr;  // set while armed (owner's thread only)
};
static_assert(sizeof(TimerEntry) == 56);

class Timers {
 public:
  // `groups` is 1 (every shard in one park group) or `shards` (a group per shard).
  explicit Timers(std::size_t shards, std::size_t groups = 1);
  Timers(const Timers&) = delete;
  Timers& operator=(const Timers&) = delete;

  // The driver to unpark when an arm in `group` is earlier than its park (null: none).
  void set_driver(std::size_t group, Driver* d) { groups_[group].driver = d; }

  // Fires the timers of `group` due at `now`, at most `max` (the rest stay due for the
  // next call). Returns how many fired. Any thread; called by the group's driver holder.
  std::size_t process(Clock::time_point now, std::size_t max = SIZE_MAX, std::size_t group = 0);
  // How long a park may block before the group's next timer is due (nullopt: no timer),
  // and publishes that deadline for arms to compare against. end_park() after the park.
  std::optional<std::chrono::milliseconds> begin_park(Clock::time_point now, std::size_t group = 0);
  void end_park(std::size_t group = 0) { groups_[group].park_deadline.store(kNotParked, std::memory_order_seq_cst); }
  // When the group's parked holder wakes on its own (ms on the wheels' clock; 0 while
  // nobody is parked in its driver, UINT64_MAX when it waits for I/O only).
  uint64_t parked_until(std::size_t group = 0) const {
    return groups_[group].park_deadline.load(std::memory_order_seq_cst);
  }

  std::size_t pending() const;
  // Milliseconds on the wheels' clock (from the runtime's start), rounded up for
  // deadlines so that a timer never fires before its time point.
  uint64_t deadline_ms(Clock::time_point t) const;
  uint64_t now_ms(Clock::time_point t) const;

  // Tears every pending timer down at shutdown: their waits complete as aborted
  // (std::errc::operation_canceled), and later arms fail as already due.
  void shutdown();

 private:
  friend class TimerEntry;
  static constexpr uint64_t kNotParked = 0;

  struct alignas(64) Shard {
    SpinLock mu;
    TimerWheel wheel;     // under mu
    bool closed = false;  // under mu: shut down, arms fail as already due
    // No earlier than the wheel's next expiration (kNoDeadline: empty), so process() and
    // begin_park() can skip a shard without its lock. Written under mu; a cancel leaves
    // it early, which costs one needless visit.
    std::atomic<uint64_t> next_due{UINT64_MAX};
  };

  struct alignas(64) Group {
    Driver* driver = nullptr;
    // ms at which the group's parked holder wakes on its own (UINT64_MAX: it waits for I/O
    // only); kNotParked while nobody is parked in the group's driver.
    std::atomic<uint64_t> park_deadline{kNotParked};
  };

  bool arm(TimerEntry& e, uint64_t when);
  void cancel(TimerEntry& e);
  // The shards [first, last) of a group.
  std::pair<std::size_t, std::size_t> shards_of(std::size_t group) const {
    return num_groups_ == 1 ? std::pair<std::size_t, std::size_t>{0, num_shards_}
                            : std::pair<std::size_t, std::size_t>{group, group + 1};
  }
  std::size_t group_of(std::size_t shard) const { return num_groups_ == 1 ? 0 : shard; }

  const Clock::time_point origin_;
  std::unique_ptr<Shard[]> shards_;
  const std::size_t num_shards_;
  std::unique_ptr<Group[]> groups_;
  const std::size_t num_groups_;
};

// The clock read once per task poll: the first call in a poll reads the clock, later ones
// in the same poll return that reading. Off-worker threads read the clock every time.
inline Clock::time_point tick_now() noexcept {
  ThreadContext& c = tl_ctx;
  if (!c.budget_active) return Clock::now();
  if (!c.tick_now_valid) {
    c.tick_now = Clock::now();
    c.tick_now_valid = true;
  }
  return c.tick_now;
}

// The timers of the runtime running the calling task (nullptr off-runtime).
Timers* current_timers() noexcept;

// co_await sleep_until(t): suspends the calling task until `t`. A time already past
// spends a unit of coop budget instead (and yields when the budget is gone).
class SleepAwaiter {
 public:
  explicit SleepAwaiter(Clock::time_point at) : at_(at) {}
  bool await_ready() const noexcept { return at_ <= tick_now() && coop_proceed(); }
  bool await_suspend(std::coroutine_handle<> h) {
    Waker w = arm_wait(h);
    Timers* timers = current_timers();
    if (timers != nullptr && entry_.arm(*timers, at_, w, 0)) return true;
    std::move(w).wake({}, ScheduleKind::kYield);  // due already: go round the queue once
    return true;
  }
  void await_resume() const noexcept {}

 private:
  Clock::time_point at_;
  TimerEntry entry_;
};

inline SleepAwaiter sleep_until(Clock::time_point t) { return SleepAwaiter(t); }
inline SleepAwaiter sleep_for(Clock::duration d) { return SleepAwaiter(tick_now() + d); }

}  // namespace sg::exec
