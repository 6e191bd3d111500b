// Scheduler: the state a runtime's workers share (workers, injection queue, idle
// coordination, I/O driver, blocking pool) and the shutdown protocol. Internal to exec/;
// users go through runtime.h.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "exec/blocking_pool.h"
#include "exec/config.h"
#include "exec/context.h"
#include "exec/driver.h"
#include "exec/idle.h"
#include "exec/inject_queue.h"
#include "exec/stats.h"
#include "exec/task.h"
#include "exec/task_registry.h"
#include "exec/timers.h"
#include "exec/worker.h"

namespace sg::exec {

class Scheduler {
 public:
  // `driver`: one I/O driver shared by every worker (null: no I/O). `per_worker`, when
  // given instead, makes each worker's own driver.
  Scheduler(const RuntimeConfig& cfg, std::unique_ptr<Driver> driver, DriverFactory per_worker = {});
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void start();

  // Queues a task that just became NOTIFIED: locally when called on one of our workers,
  // otherwise through the injection queue. After shutdown it drops the task instead.
  void schedule(TaskHeader* t, ScheduleKind kind);
  void schedule_remote(TaskHeader* t);
  // Wakes one sleeping worker if the idle protocol says one is needed.
  void notify_parked();
  // Wakes a sleeper when any queue has work (the last searcher's final check).
  void notify_if_work_pending();

  // Shutdown, in order (see runtime.h for what happens to tasks):
  //   1. close the injection queue and wake every worker; workers exit their loops;
  //   2. join the workers; 3. shut the blocking pool down (queued blocking tasks dropped,
  //   running ones finish); 4. mark shutdown complete: from now on a scheduled task is
  //   dropped on the spot; drop every queued task; 5. shut the I/O driver down (pending
  //   completions abort their waits, so their tasks are dropped too); 6. drain again.
  void shutdown();
  bool is_shutdown_complete() const { return shutdown_complete_.load(std::memory_order_acquire); }

  // Shuts down and frees the scheduler. Tasks can outlive their runtime only by being
  // suspended on a primitive that outlives it (their waker still points here); if any
  // task is still alive, the scheduler stays allocated as a "zombie" that drops whatever
  // is scheduled on it, instead of becoming a dangling pointer.
  static void release(std::unique_ptr<Scheduler> s);

  // Live-task accounting. Each worker counts in its own cache line with plain
  // load/store (only it writes there); other threads share one atomic slot. Slots may go
  // negative (a task freed on another worker than the one that spawned it); only the
  // sum means anything.
  void note_task_created() noexcept {
    const ThreadContext& c = tl_ctx;
    if (c.scheduler == this) {
      // Only this thread writes its slot: a plain read-modify-write, no lock prefix.
      c.live_slot->store(c.live_slot->load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    } else {
      note_remote_created();
    }
  }
  void note_task_freed() noexcept {
    const ThreadContext& c = tl_ctx;
    if (c.scheduler == this) {
      c.live_slot->store(c.live_slot->load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    } else {
      note_remote_freed();
    }
  }
  int64_t live_tasks() const noexcept;
  std::atomic<int64_t>* live_slot(std::size_t worker) noexcept;

  RuntimeStats stats() const;

  // Gives a new task (not yet queued) its kind and, with task diagnostics, its record.
  void label_new_task(TaskHeader* t, const TaskLabel& label);
  TaskRegistry& tasks() { return tasks_; }
  const TaskRegistry& tasks() const { return tasks_; }
  // The slowest recent polls of every worker, slowest first.
  std::vector<SlowPoll> slow_polls() const;

  const RuntimeConfig& config() const { return cfg_; }
  InjectQueue& inject() { return inject_; }
  Idle& idle() { return idle_; }
  DriverSlot& driver_slot(std::size_t worker) { return slots_[per_worker_drivers_ ? worker : 0]; }
  bool per_worker_drivers() const { return per_worker_drivers_; }
  Timers& timers() { return timers_; }
  BlockingPool& blocking() { return *blocking_; }
  std::size_t num_workers() const { return workers_.size(); }
  Worker& worker(std::size_t i) { return *workers_[i]; }
  // The kernel's ids of the worker threads, by index (0 for one not started yet).
  std::vector<int> worker_thread_ids() const;
  bool is_worker_thread() const;

 private:
  void drain_queues();
  void note_remote_created() noexcept;
  void note_remote_freed() noexcept;

  const RuntimeConfig cfg_;
  const bool per_worker_drivers_;
  std::vector<std::unique_ptr<Driver>> drivers_;  // the I/O drivers: one shared, or one per worker
  // Parks the driver's holder when the runtime has no I/O driver (timers still fire).
  std::unique_ptr<Driver> sleep_driver_;
  std::unique_ptr<DriverSlot[]> slots_;  // one shared, or one per worker
  Timers timers_;
  TaskRegistry tasks_;
  InjectQueue inject_;
  Idle idle_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<BlockingPool> blocking_;
  std::atomic<uint64_t> remote_schedules_{0};
  std::atomic<bool> shutdown_complete_{false};
  struct alignas(64) LiveSlot {
    std::atomic<int64_t> n{0};
  };
  std::unique_ptr<LiveSlot[]> live_;  // one per worker, then one shared

  std::atomic<bool> shutdown_started_{false};
};

}  // namespace sg::exec
