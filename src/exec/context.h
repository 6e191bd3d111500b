// Per-thread execution context: which runtime/worker this thread is, which coroutine task
// it is polling, and the task's cooperative budget.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "exec/stats.h"

namespace sg::exec {

class Scheduler;
class Worker;
struct CoroTaskBase;

struct ThreadContext {
  Scheduler* scheduler = nullptr;   // set on worker threads
  Worker* worker = nullptr;         // set on worker threads
  std::size_t worker_index = 0;
  std::atomic<int64_t>* live_slot = nullptr;  // this worker's live-task counter
  CoroTaskBase* current = nullptr;  // coroutine task being polled on this thread
  WorkerCounters* counters = nullptr;
  uint32_t budget = 0;              // operations left in this scheduling
  bool budget_active = false;       // false outside task polls: no budget applies
  bool yield_requested = false;     // the polled task asked to go to the back of the queue
  bool in_driver = false;           // dispatching I/O driver completions
  bool in_timers = false;           // firing due timers (a wake's source is the timer)
  bool tick_now_valid = false;      // tick_now holds this poll's clock reading
  std::chrono::steady_clock::time_point tick_now{};
  uint64_t driver_stamp_ns = 0;     // in_driver: when this dispatch's completions were seen (0: not read yet)
};

// Constant-initialised, so access compiles to a plain TLS load (no wrapper call).
inline thread_local ThreadContext tl_ctx;

// Marks the running coroutine task as serving admitted work (or not any more): while set,
// its wake-ups are queued in the worker's priority lane, ahead of ordinary work (see
// worker.cpp). A gateway sets it once a request holds its admission permits, so that the
// responses of admitted requests are not stuck behind a flood of new requests. No-op
// outside a task.
void set_current_task_priority(bool on) noexcept;

// Spends one unit of the running task's budget. False means the budget is exhausted: the
// caller must make the task yield (after completing its operation, if it did).
inline bool coop_proceed() noexcept {
  ThreadContext& c = tl_ctx;
  if (!c.budget_active) return true;
  if (c.budget == 0) return false;
  --c.budget;
  return true;
}

// True when the current task still has budget (does not spend any).
inline bool coop_has_budget() noexcept {
  const ThreadContext& c = tl_ctx;
  return !c.budget_active || c.budget != 0;
}

}  // namespace sg::exec
