// JoinHandle<T>: observes a spawned task's completion, reads its output, cancels it.
#pragma once

#include <atomic>
#include <coroutine>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include "exec/coro.h"
#include "exec/task.h"

namespace sg::exec {

// What awaiting or waiting on a JoinHandle yields: the value, or nothing when the task was
// cancelled (void tasks: true when it ran to completion). An exception escaping the task
// is rethrown to the joiner.
template <class T>
using JoinResult = std::conditional_t<std::is_void_v<T>, bool, std::optional<T>>;

// Requests cancellation of `t`, which the caller knows to be alive (it holds a reference,
// or the task cannot finish meanwhile). A task that has not started never runs; a
// suspended coroutine task is dropped (its frame destroyed) at its next scheduling, which
// this call causes; a running task is dropped when it next suspends.
inline void cancel_task(JoinableTask* t) noexcept {
  using namespace task_state;
  if (t->diag != nullptr) note_wake(t);
  uint32_t prev = t->state.fetch_or(kCancelled | kNotified, std::memory_order_acq_rel);
  if ((prev & (kRunning | kNotified | kComplete)) == 0) schedule_task(t, ScheduleKind::kYield);
}

template <class T>
class [[nodiscard]] JoinHandle {
 public:
  JoinHandle() = default;
  JoinHandle(JoinableTask* t, TaskOutput<T>* out) noexcept : t_(t), out_(out) {}
  JoinHandle(JoinHandle&& o) noexcept
      : t_(std::exchange(o.t_, nullptr)),
        out_(std::exchange(o.out_, nullptr)),
        registered_waiter_(std::exchange(o.registered_waiter_, false)) {}
  JoinHandle& operator=(JoinHandle&& o) noexcept {
    if (this != &o) {
      detach();
      t_ = std::exchange(o.t_, nullptr);
      out_ = std::exchange(o.out_, nullptr);
      registered_waiter_ = std::exchange(o.registered_waiter_, false);
    }
    return *this;
  }
  JoinHandle(const JoinHandle&) = delete;
  JoinHandle& operator=(const JoinHandle&) = delete;
  ~JoinHandle() { detach(); }

  bool valid() const noexcept { return t_ != nullptr; }

  bool is_finished() const noexcept {
    return (t_->state.load(std::memory_order_acquire) & task_state::kComplete) != 0;
  }

  // Requests cancellation (cancel_task). Completion is observable as usual.
  void cancel() noexcept { cancel_task(t_); }

  // Drops interest in the output; the task keeps running.
  void detach() noexcept {
    if (t_ == nullptr) return;
    using namespace task_state;
    uint32_t prev = registered_waiter_ ? t_->state.fetch_and(~kJoinWaiter, std::memory_order_acq_rel) : 0;
    if ((prev & kJoinWaiter) && !(prev & kComplete)) {
      // We registered a waiter and the task has not completed: the slot (and the waiter
      // reference it holds) is ours to drop.
      task_ref_dec(static_cast<CoroTaskBase*>(t_->join_waiter_task));
    }
    // Drop JOIN_INTEREST and our reference in one RMW (both known set, so no borrow).
    prev = t_->state.fetch_sub(kJoinInterest + kRefOne, std::memory_order_acq_rel);
    if ((prev & kRefMask) == kRefOne) t_->vtable->dealloc(t_);
    t_ = nullptr;
    out_ = nullptr;
    registered_waiter_ = false;
  }

  // Blocks the calling thread until the task completes. Never call it on a worker thread
  // of the task's runtime (that worker could be the one that has to run it).
  JoinResult<T> wait() {
    using namespace task_state;
    uint32_t s = t_->state.load(std::memory_order_acquire);
    while (!(s & kComplete)) {
      if (!(s & kBlockingWaiter)) {
        if (!t_->state.compare_exchange_weak(s, s | kBlockingWaiter, std::memory_order_acq_rel,
                                             std::memory_order_acquire)) {
          continue;
        }
        s |= kBlockingWaiter;
      }
      t_->state.wait(s, std::memory_order_acquire);
      s = t_->state.load(std::memory_order_acquire);
    }
    return take();
  }

  // Awaits completion from inside a coroutine task.
  auto operator co_await() & noexcept {
    struct Awaiter {
      JoinHandle* h;
      bool await_ready() const noexcept { return h->is_finished(); }
      bool await_suspend(std::coroutine_handle<> c) const noexcept {
        using namespace task_state;
        JoinableTask* t = h->t_;
        h->registered_waiter_ = true;
        Waker w = arm_wait(c);
        uint64_t gen = w.generation();
        CoroTaskBase* self = w.release();
        t->join_waiter_task = self;
        t->join_waiter_gen = gen;
        // Release publishes the slot to the completer that sees JOIN_WAITER.
        uint32_t prev = t->state.fetch_or(kJoinWaiter, std::memory_order_acq_rel);
        if (prev & kComplete) {
          // Completed before we registered: the completer ignored the slot. Take it back.
          t->state.fetch_and(~kJoinWaiter, std::memory_order_relaxed);
          disarm_wait(self, gen);
          task_ref_dec(self);
          return false;
        }
        return true;
      }
      JoinResult<T> await_resume() const { return h->take(); }
    };
    return Awaiter{this};
  }
  auto operator co_await() && noexcept { return operator co_await(); }

 private:
  JoinResult<T> take() {
    if (out_->error) std::rethrow_exception(out_->error);
    if constexpr (std::is_void_v<T>) {
      return out_->value;
    } else {
      return std::move(out_->value);
    }
  }

  JoinableTask* t_ = nullptr;
  TaskOutput<T>* out_ = nullptr;
  bool registered_waiter_ = false;  // saves an RMW in detach() when nobody awaited
};

}  // namespace sg::exec
