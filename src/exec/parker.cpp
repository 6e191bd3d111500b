#include "exec/parker.h"

#include "exec/context.h"
#include "exec/timers.h"

namespace sg::exec {

namespace {

// Marks the thread as dispatching driver completions, so tasks they wake go to the back
// of this worker's queue instead of churning its LIFO slot; and so that the wakes of one
// dispatch share one clock reading (task_registry.cpp, stamp_now).
struct DriverScope {
  DriverScope() { tl_ctx.in_driver = true; }
  ~DriverScope() {
    tl_ctx.in_driver = false;
    tl_ctx.driver_stamp_ns = 0;
  }
};

}  // namespace

bool Parker::park(uint32_t max_events, std::optional<std::chrono::milliseconds> limit) {
  uint32_t expected = kNotified;
  if (state_.compare_exchange_strong(expected, kEmpty, std::memory_order_seq_cst)) return false;
  if (driver_->lock.try_lock()) {
    park_driver(max_events, limit);
    driver_->lock.unlock();
    return true;
  }
  park_condvar(limit);
  return false;
}

void Parker::park_condvar(std::optional<std::chrono::milliseconds> limit) {
  std::unique_lock lk(mu_);
  uint32_t expected = kEmpty;
  if (!state_.compare_exchange_strong(expected, kParkedCondvar, std::memory_order_seq_cst)) {
    // Notified between the first check and here: consume it.
    state_.exchange(kEmpty, std::memory_order_seq_cst);
    return;
  }
  const auto deadline = limit ? std::chrono::steady_clock::now() + *limit : std::chrono::steady_clock::time_point{};
  for (;;) {
    if (!limit) {
      cv_.wait(lk);
    } else if (cv_.wait_until(lk, deadline) == std::cv_status::timeout) {
      // Out of time: leave PARKED_CONDVAR, or consume a notification that raced us.
      state_.exchange(kEmpty, std::memory_order_seq_cst);
      return;
    }
    expected = kNotified;
    if (state_.compare_exchange_strong(expected, kEmpty, std::memory_order_seq_cst)) return;
    // Spurious wake-up: keep waiting.
  }
}

void Parker::park_driver(uint32_t max_events, std::optional<std::chrono::milliseconds> limit) {
  uint32_t expected = kEmpty;
  if (!state_.compare_exchange_strong(expected, kParkedDriver, std::memory_order_seq_cst)) {
    state_.exchange(kEmpty, std::memory_order_seq_cst);
    return;
  }
  {
    DriverScope scope;
    Timers& timers = *driver_->timers;
    // Timers already due are this park's events: dispatch them (and whatever I/O is
    // ready) instead of blocking. Timers go first, within the same budget: due timers
    // are finite, so they cannot starve the I/O, while a steady stream of I/O could
    // starve deadlines, which are what bounds an overloaded gateway.
    const Clock::time_point now = Clock::now();
    auto fired = static_cast<uint32_t>(timers.process(now, max_events, driver_->timer_group));
    if (fired != 0) {
      driver_->driver->poll(max_events - fired);
    } else {
      std::optional<std::chrono::milliseconds> timeout = timers.begin_park(now, driver_->timer_group);
      if (limit && (!timeout || *limit < *timeout)) timeout = limit;
      tl_ctx.driver_stamp_ns = 0;  // (nothing read before the wait stands for what it brings)
      uint32_t n = driver_->driver->park(max_events, timeout);
      timers.end_park(driver_->timer_group);
      if (n < max_events) timers.process(Clock::now(), max_events - n, driver_->timer_group);
    }
  }
  // Either still PARKED_DRIVER (woken by I/O) or NOTIFIED (woken by unpark): both end here.
  state_.exchange(kEmpty, std::memory_order_seq_cst);
}

std::optional<uint32_t> Parker::poll_driver(uint32_t max_events) {
  if (!driver_->lock.try_lock()) return std::nullopt;
  uint32_t events = 0;
  {
    DriverScope scope;
    events = static_cast<uint32_t>(driver_->timers->process(Clock::now(), max_events, driver_->timer_group));
    events += driver_->driver->poll(max_events - events);
  }
  driver_->lock.unlock();
  return events;
}

void Parker::unpark() {
  switch (state_.exchange(kNotified, std::memory_order_seq_cst)) {
    case kEmpty:
    case kNotified:
      return;
    case kParkedCondvar: {
      // Taking the lock orders this signal after the parked thread's wait began.
      { std::lock_guard lk(mu_); }
      cv_.notify_one();
      return;
    }
    case kParkedDriver:
      driver_->driver->unpark();
      return;
    default:
      return;
  }
}

}  // namespace sg::exec
