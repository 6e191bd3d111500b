// Per-worker park/unpark (Tokio's park.rs). A parking worker try-locks its driver slot: the
// winner blocks in the I/O driver until I/O, an unpark or the next timer, and fires due
// timers; the others sleep on their own condition variable. With a driver per worker the
// slot is the worker's own and the try-lock always wins.
//
// State machine (one atomic per worker):
//   EMPTY -> PARKED_CONDVAR | PARKED_DRIVER   (the parking thread, by CAS)
//   any   -> NOTIFIED                          (unpark, by swap; the old value tells how to
//                                              wake: signal the condvar or the driver)
//   NOTIFIED -> EMPTY                          (the parked thread consumes the notification)
// A notification that arrives before park() is not lost: park() consumes it and returns.
// The condvar branch takes the mutex around the state change and the unparker takes it
// before signalling, so a signal cannot fall between the CAS and the wait.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>

#include "exec/driver.h"

namespace sg::exec {

class Parker {
 public:
  explicit Parker(DriverSlot* driver) : driver_(driver) {}

  // Sleeps until unpark(), or, when this thread wins the driver, until I/O is ready; in
  // either case no longer than `limit` when one is given. Returns true when this thread
  // drove the I/O driver.
  bool park(uint32_t max_events, std::optional<std::chrono::milliseconds> limit = std::nullopt);
  // Polls the driver without blocking: due timers and ready I/O, up to max_events. Returns
  // how many it dispatched, or nullopt when another thread holds the driver (a shared one).
  std::optional<uint32_t> poll_driver(uint32_t max_events);
  void unpark();
  // A per-worker driver's thread hooks (exec::Driver::attach/detach), and the flush of
  // queued submissions at the end of a batch (false when the driver is not visited then),
  // which says whether completions may be ready to poll (exec::Driver::flush).
  void attach() { if (driver_->own) driver_->driver->attach(); }
  void detach() { if (driver_->own) driver_->driver->detach(); }
  bool flush() { return driver_->visited_when_idle && driver_->driver->flush(); }
  // A per-worker driver is shut down by its worker's thread, the last thing it does.
  void shutdown_own_driver() { if (driver_->own) driver_->driver->shutdown(); }

 private:
  static constexpr uint32_t kEmpty = 0, kParkedCondvar = 1, kParkedDriver = 2, kNotified = 3;

  void park_condvar(std::optional<std::chrono::milliseconds> limit);
  void park_driver(uint32_t max_events, std::optional<std::chrono::milliseconds> limit);

  std::atomic<uint32_t> state_{kEmpty};
  std::mutex mu_;
  std::condition_variable cv_;
  DriverSlot* driver_;
};

}  // namespace sg::exec
