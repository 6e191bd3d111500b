// Tasks: a type-erased header shared by closure tasks and coroutine tasks, its state
// machine, and wakers.
//
// State word (one 32-bit atomic, Tokio's task/state.rs reduced to what we need):
//   RUNNING          a thread is polling the task
//   NOTIFIED         the task is queued (or will be requeued when the poll ends)
//   COMPLETE         the output (or cancellation) is final
//   CANCELLED        cancellation was requested; the next poll drops the future
//   JOIN_INTEREST    a JoinHandle exists
//   JOIN_WAITER      a task awaiting the JoinHandle registered its Waker in `join_waiter`
//   BLOCKING_WAITER  a thread blocks in JoinHandle::wait() on this word (futex)
//   refcount         in units of REF_ONE: one held by the task itself until it completes,
//                    one by the JoinHandle, one by every outstanding Waker
// Transitions:
//   schedule   idle -> NOTIFIED (whoever sets NOTIFIED on an idle task pushes it)
//   poll       NOTIFIED -> RUNNING; then RUNNING -> idle, or -> NOTIFIED (yield / woken
//              while running: the poller requeues), or -> COMPLETE
//   wake       sets NOTIFIED; pushes only if the task was neither RUNNING, NOTIFIED nor
//              COMPLETE, so a task is in at most one queue and polled by one thread
// Memory orders: every transition is an acq_rel RMW on the one word, so whatever a poll
// wrote is visible to the next poll (possibly on another worker), and a waker's writes
// before wake() are visible to the poll it causes.
#pragma once

#include <atomic>
#include <cassert>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

#include "exec/alloc.h"
#include "exec/context.h"
#include "exec/task_diag.h"

namespace sg::exec {

class Scheduler;
class Worker;
struct TaskHeader;

struct TaskVTable {
  // Runs one scheduling. Called by one thread, with NOTIFIED set and RUNNING clear.
  void (*poll)(TaskHeader*) noexcept;
  // Drops the future without running it and completes the task as cancelled
  // (runtime shutdown). Same preconditions as poll.
  void (*shutdown)(TaskHeader*) noexcept;
  // Frees the task's memory once the reference count reaches zero.
  void (*dealloc)(TaskHeader*) noexcept;
};

namespace task_state {
inline constexpr uint32_t kRunning = 1u << 0;
inline constexpr uint32_t kNotified = 1u << 1;
inline constexpr uint32_t kComplete = 1u << 2;
inline constexpr uint32_t kCancelled = 1u << 3;
inline constexpr uint32_t kJoinInterest = 1u << 4;
inline constexpr uint32_t kJoinWaiter = 1u << 5;
inline constexpr uint32_t kBlockingWaiter = 1u << 6;
// The task serves admitted work (set_current_task_priority): its wake-ups go to the
// worker's priority lane. Set and cleared only by the task itself while it runs.
inline constexpr uint32_t kPriority = 1u << 7;
inline constexpr uint32_t kRefOne = 1u << 8;
inline constexpr uint32_t kRefMask = ~(kRefOne - 1);
}  // namespace task_state

struct TaskHeader {
  TaskHeader(const TaskVTable* vt, Scheduler* s, uint32_t initial_state)
      : vtable(vt), scheduler(s), state(initial_state) {}
  TaskHeader(const TaskHeader&) = delete;
  TaskHeader& operator=(const TaskHeader&) = delete;

  const TaskVTable* vtable;
  Scheduler* scheduler;          // the runtime that runs (and reschedules) this task
  TaskHeader* next = nullptr;    // link while in the injection queue or a batch
  std::atomic<uint32_t> state;
  uint8_t is_coroutine = 0;      // 1 for CoroTask (can suspend and be woken)
  TaskKind kind = TaskKind::kTask;
  // Worker index + 1 for a worker-pinned task (spawn_local), 0 otherwise. Written before
  // the task is first queued, never changed: the queueing publishes it.
  uint16_t pinned_to = 0;
  uint64_t ready_ns = 0;         // sampled time it became runnable; 0 = not sampled
  TaskDiag* diag = nullptr;      // with RuntimeConfig::task_diagnostics (task_diag.h)
};

// Where a scheduled task should go (see Worker::schedule_local).
enum class ScheduleKind : uint8_t {
  kWake,   // woken or spawned by the running task: LIFO slot when on a worker
  kYield,  // back of the local queue (yield, forced yield)
  kDriver, // woken by an I/O completion on the worker polling the driver: back of queue
  kRequeue,  // woken while it ran (requeued when its poll returned): back of the local
             // queue, or the priority lane for admitted work, whose wake-up it is
};

// Queues `t` on its runtime; called by whoever moved the task from idle to NOTIFIED. The
// common case (a worker of the task's own runtime, a task that is not pinned) is one call
// into the worker; anything else goes through the scheduler (scheduler.cpp), which sends
// a pinned task to its own worker's pinned queue.
void worker_schedule_local(Worker* w, TaskHeader* t, ScheduleKind kind) noexcept;
void schedule_task_slow(TaskHeader* t, ScheduleKind kind) noexcept;
inline void schedule_task(TaskHeader* t, ScheduleKind kind) noexcept {
  if (t->diag != nullptr) note_runnable(t);
  const ThreadContext& c = tl_ctx;
  if (c.scheduler == t->scheduler && c.worker != nullptr && t->pinned_to == 0) {
    worker_schedule_local(c.worker, t, kind);
  } else {
    schedule_task_slow(t, kind);
  }
}
// Live-task accounting (per-thread slots, see Scheduler::live_tasks): every task type
// calls these when its memory is allocated and freed.
void note_task_created(Scheduler* s) noexcept;
void note_task_freed(Scheduler* s) noexcept;

inline void task_ref_inc(TaskHeader* t) noexcept {
  // Relaxed: a new reference is always derived from an existing one, which keeps the
  // task alive; no ordering is needed to create it (as with shared_ptr copies).
  t->state.fetch_add(task_state::kRefOne, std::memory_order_relaxed);
}

inline void task_ref_dec(TaskHeader* t) noexcept {
  // acq_rel: the last owner must see every other owner's writes before freeing.
  uint32_t prev = t->state.fetch_sub(task_state::kRefOne, std::memory_order_acq_rel);
  assert((prev & task_state::kRefMask) >= task_state::kRefOne);
  if ((prev & task_state::kRefMask) == task_state::kRefOne) t->vtable->dealloc(t);
}

// Wakes `t` (the caller keeps its reference). Safe while the task runs: the poller then
// requeues it when its poll returns.
inline void wake_task(TaskHeader* t, ScheduleKind kind = ScheduleKind::kWake) noexcept {
  using namespace task_state;
  if (t->diag != nullptr) note_wake(t);
  uint32_t prev = t->state.fetch_or(kNotified, std::memory_order_acq_rel);
  if ((prev & (kRunning | kNotified | kComplete)) == 0) schedule_task(t, kind);
}

// ---------------------------------------------------------------------------------------
// Output storage shared by every task kind; read through JoinHandle<T>.

template <class T>
struct TaskOutput {
  std::optional<T> value;
  std::exception_ptr error;
};
template <>
struct TaskOutput<void> {
  bool value = false;
  std::exception_ptr error;
};

class Waker;

// Base of tasks that can be joined: holds the output and the awaiting task's waker.
struct JoinableTask : TaskHeader {
  using TaskHeader::TaskHeader;
  // Written by the awaiting task before it sets JOIN_WAITER; read by the completer only
  // after it observes JOIN_WAITER in its completion RMW (or by the handle after clearing it).
  void* join_waiter_task = nullptr;
  uint64_t join_waiter_gen = 0;
};

// Completes a RUNNING task: publishes COMPLETE, wakes whoever joins it and drops the
// task's own reference. Defined in task.cpp.
void complete_task(JoinableTask* t) noexcept;

// Closure task: runs a callable once. spawn() allocates it from the task allocator.
template <class F, class R>
struct ClosureTask final : JoinableTask {
  ClosureTask(Scheduler* s, F&& f, bool with_handle)
      : JoinableTask(&kVTable, s,
                     task_state::kNotified + task_state::kRefOne +
                         (with_handle ? task_state::kJoinInterest + task_state::kRefOne : 0)),
        fn(std::move(f)) {}

  static void* operator new(std::size_t n) { return task_alloc(n); }
  static void operator delete(void* p, std::size_t n) noexcept { task_free(p, n); }

  union {
    F fn;  // alive from construction until run or dropped
  };
  TaskOutput<R> output;

  ~ClosureTask() {}

  void run_fn() noexcept {
    try {
      if constexpr (std::is_void_v<R>) {
        fn();
        output.value = true;
      } else {
        output.value.emplace(fn());
      }
    } catch (...) {
      output.error = std::current_exception();
    }
    fn.~F();
  }

  static void poll(TaskHeader* h) noexcept {
    using namespace task_state;
    auto* self = static_cast<ClosureTask*>(h);
    // Fast path: no JoinHandle and no other reference means no other thread can ever
    // touch this task again (cancellation needs a handle), so skip the RMWs.
    // Acquire pairs with the handle's release when it was dropped.
    uint32_t s = h->state.load(std::memory_order_acquire);
    if ((s & (kRefMask | kJoinInterest)) == kRefOne) {
      self->run_fn();
      dealloc(h);
      return;
    }
    uint32_t prev = h->state.fetch_xor(kNotified | kRunning, std::memory_order_acq_rel);
    if (prev & kCancelled) {
      self->fn.~F();
    } else {
      self->run_fn();
    }
    complete_task(self);
  }

  static void shutdown(TaskHeader* h) noexcept {
    auto* self = static_cast<ClosureTask*>(h);
    h->state.fetch_xor(task_state::kNotified | task_state::kRunning, std::memory_order_acq_rel);
    self->fn.~F();
    complete_task(self);
  }

  static void dealloc(TaskHeader* h) noexcept {
    Scheduler* s = h->scheduler;
    if (h->diag != nullptr) release_task_diag(h);
    delete static_cast<ClosureTask*>(h);
    note_task_freed(s);
  }

  static constexpr TaskVTable kVTable{&poll, &shutdown, &dealloc};
};

}  // namespace sg::exec
