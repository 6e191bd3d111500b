// The io_uring driver: one ring per worker (exec::DriverFactory), driven by that worker
// alone. A socket wait is an operation on the ring of the worker whose task waits
// (IORING_OP_POLL_ADD); its completion is reaped by that worker (at its park, and when it
// polls its driver every event_interval ticks) and wakes the task there, through the
// usual exec::Waker (LIFO slot or local queue, coop budget). Submissions queue in the
// ring and go to the kernel in batches: when the worker's local queue runs dry (before it
// steals or parks, exec::Driver::flush), at its driver polls (every event_interval ticks),
// and when the queue is full. Flushing after every task poll instead cost one
// io_uring_enter per wait (2.1 per proxied GET at 64 connections, 0.3 batched) and 13%
// more CPU per request at 1,000 connections.
// A parked worker sleeps in io_uring_enter on its own ring; unpark() writes the ring's
// eventfd, on which a read is always pending.
//
// Work stealing: a task stolen to another worker keeps its operations where it started
// them; their completions land on the first worker's ring and wake the task from there
// (any worker may poll any task). Its next operations go to the ring of the worker it
// then runs on.
//
// Cancellation: a wait that lost a race (its deadline fired, or the other socket of an
// either-wait) or whose task was dropped cancels its operation (IORING_OP_ASYNC_CANCEL by
// user_data). An operation is reference-counted (its ring's reference until the final
// completion, the waiter's until it cancelled or saw it complete), so a cancel never
// names freed or reused memory. A cancel from another thread than the ring's (a stolen
// task, a task dropped at shutdown) is queued to the ring and the ring unparked. The
// operation's final completion then finds the wait already taken (the waker's generation
// moved on) and only drops its references: a task that stopped waiting never sees it, and
// a closed socket holds no operation once its cancels are flushed.
#pragma once

#include <liburing.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/result.h"
#include "exec/coro.h"
#include "exec/driver.h"

namespace sg::io {

class UringDriver;

// One in-flight operation. Allocated by start_poll(), freed by its last reference.
struct UringOp {
  std::atomic<uint32_t> refs{2};      // the ring's (until the final CQE) and the waiter's
  std::atomic<bool> completed{false};  // the final CQE was reaped (release/acquire)
  exec::Waker waker;
  std::size_t tag = 0;
  UringDriver* ring = nullptr;
};

// Drops the waiter's reference to `op`, cancelling it first if it has not completed.
void cancel_and_release(UringOp* op) noexcept;

class UringDriver final : public exec::Driver {
 public:
  // A ring of `entries` submission slots with its wake-up eventfd; the error when the
  // kernel refuses io_uring (sysctl kernel.io_uring_disabled, a seccomp filter, ENOMEM).
  static Result<std::unique_ptr<UringDriver>> create(unsigned entries = 256);
  // Whether this kernel and process may use io_uring (tries to set up a small ring);
  // `why` gets the reason when not.
  static bool available(std::string& why);
  ~UringDriver() override;
  UringDriver(const UringDriver&) = delete;
  UringDriver& operator=(const UringDriver&) = delete;

  uint32_t park(uint32_t max_events, std::optional<std::chrono::milliseconds> timeout) override;
  uint32_t poll(uint32_t max_events) override;
  void attach() override;
  void detach() override;
  bool batches_submissions() const override { return true; }
  void flush() override;
  void unpark() override;
  void shutdown() override;

  // Starts a poll for `events` (POLLIN/POLLOUT) on `fd` that completes `w`'s wait with
  // `tag` (or with the error). Only from the ring's worker thread. Returns the operation,
  // holding the caller's reference (give it back with cancel_and_release).
  UringOp* start_poll(int fd, uint32_t events, exec::Waker w, std::size_t tag);

  // Operations started and not yet completed, and cancels: sent by this ring's worker, and
  // queued to it by other threads (for tests and metrics).
  std::size_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  uint64_t cancels() const { return cancels_.load(std::memory_order_relaxed); }
  uint64_t remote_cancels() const { return remote_cancels_total_.load(std::memory_order_relaxed); }

 private:
  friend void cancel_and_release(UringOp* op) noexcept;
  UringDriver() = default;

  bool on_ring_thread() const;
  io_uring_sqe* sqe();
  void submit_cancel(UringOp* op);
  void queue_remote_cancel(UringOp* op);
  void drain_remote_cancels();
  void arm_wake_read();
  uint32_t reap(uint32_t max_events);
  void complete(UringOp* op, int res);
  void cancel_everything();

  io_uring ring_{};
  bool ring_ready_ = false;
  int wake_fd_ = -1;
  uint64_t wake_buf_ = 0;  // the pending eventfd read's target
  std::atomic<bool> wake_pending_{false};
  std::atomic<std::size_t> in_flight_{0};
  std::atomic<uint64_t> cancels_{0};
  std::atomic<uint64_t> remote_cancels_total_{0};

  std::mutex remote_mu_;
  std::vector<UringOp*> remote_cancels_;  // under remote_mu_; each holds a reference
  std::atomic<bool> has_remote_{false};
  bool shut_down_ = false;
};

// The io_uring ring of the worker running the calling task (nullptr when the runtime's
// driver is not io_uring, or off the workers).
UringDriver* current_ring() noexcept;

}  // namespace sg::io
