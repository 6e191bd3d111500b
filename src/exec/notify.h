// Notify: wakes one waiting task, or stores a single permit when none waits (Tokio's
// sync::Notify notify_one / notified semantics).
//
// State (atomic, so the uncontended paths take no lock; named unlike task_state's bits,
// which this file also uses):
//   NO_PERMIT    no permit, no waiter
//   PERMIT       one stored permit
//   HAS_WAITERS  the waiter list is non-empty (only changed under `mu_`)
// Only NO_PERMIT -> PERMIT (notify_one) and PERMIT -> NO_PERMIT (await_ready) happen
// without the lock; every other transition is made under `mu_`, and the transitions out of
// NO_PERMIT under the lock are CASes so they cannot overwrite a concurrent permit.
//
// Waiters live in their awaiter (in the coroutine frame) and are linked under `mu_`. A
// notifier unlinks a waiter and completes its wait under `mu_` (see complete_head_locked),
// then queues the task after unlocking (queueing can run arbitrary drop code at shutdown,
// which must not find the lock held). A waiter destroyed early (its task was cancelled)
// unlinks itself under `mu_` if still linked. Only the notifier that unlinked a waiter
// completes its wait.
#pragma once

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <mutex>

#include "exec/coro.h"
#include "exec/spin_lock.h"
#include "exec/waiter_list.h"

namespace sg::exec {

class Notify {
  static constexpr uint32_t kNoPermit = 0, kPermit = 1, kHasWaiters = 2;

  // The links, task and generation are written when the waiter is linked; only `linked`
  // is read before that (by the awaiter's destructor).
  struct Waiter {
    Waiter* prev;
    Waiter* next;
    CoroTaskBase* task;
    uint64_t gen;
    std::atomic<bool> linked{false};
  };

 public:
  Notify() = default;
  Notify(const Notify&) = delete;
  Notify& operator=(const Notify&) = delete;
  ~Notify() {
    // Tasks still waiting could never be notified again: cancel them (they are dropped at
    // their next scheduling, which this causes).
    std::unique_lock lk(mu_);
    while (!waiters_.empty()) {
      Waker waker = take_front_locked();
      lk.unlock();
      waker.task()->state.fetch_or(task_state::kCancelled, std::memory_order_acq_rel);
      std::move(waker).wake({}, ScheduleKind::kYield);
      lk.lock();
    }
  }

  // How many tasks are suspended in notified() right now (a snapshot).
  std::size_t waiter_count() {
    std::lock_guard lk(mu_);
    return waiters_.size();
  }

  // Wakes the oldest waiter, or stores a permit if nobody waits (at most one permit).
  void notify_one() {
    uint32_t s = state_.load(std::memory_order_acquire);
    for (;;) {
      if (s != kHasWaiters) {
        // Acq_rel: the task that later consumes the permit acquires our writes.
        if (state_.compare_exchange_weak(s, kPermit, std::memory_order_acq_rel,
                                         std::memory_order_acquire)) {
          return;
        }
        continue;
      }
      mu_.lock();
      s = state_.load(std::memory_order_relaxed);
      if (s != kHasWaiters) {  // the list emptied meanwhile
        mu_.unlock();
        continue;
      }
      TaskHeader* to_schedule = complete_head_locked();
      mu_.unlock();
      if (to_schedule != nullptr) schedule_task(to_schedule, ScheduleKind::kWake);
      return;
    }
  }

  auto notified() noexcept {
    struct Awaiter {
      Notify* n;
      Waiter node;
      bool forced_yield = false;
      bool waited = false;

      bool await_ready() noexcept {
        uint32_t expected = kPermit;
        if (n->state_.load(std::memory_order_relaxed) == kPermit &&
            n->state_.compare_exchange_strong(expected, kNoPermit, std::memory_order_acq_rel,
                                              std::memory_order_relaxed)) {
          // Took the permit. Completed at once; yield if the budget is spent.
          forced_yield = !coop_proceed();
          return !forced_yield;
        }
        return false;
      }
      bool await_suspend(std::coroutine_handle<> h) noexcept {
        if (forced_yield) {
          YieldAwaiter{true}.await_suspend(h);
          return true;
        }
        std::lock_guard lk(n->mu_);
        for (uint32_t s = n->state_.load(std::memory_order_acquire);;) {
          if (s == kPermit) {
            if (n->state_.compare_exchange_weak(s, kNoPermit, std::memory_order_acq_rel,
                                                std::memory_order_acquire)) {
              return false;  // a permit arrived meanwhile: continue without suspending
            }
            continue;
          }
          if (s == kNoPermit &&
              !n->state_.compare_exchange_weak(s, kHasWaiters, std::memory_order_acq_rel,
                                               std::memory_order_acquire)) {
            continue;
          }
          break;  // WAITING: stays so while we hold the lock
        }
        node.task = tl_ctx.current;
        node.gen = arm_wait_unowned(h);
        waited = true;
        n->waiters_.push_back(&node);
        node.linked.store(true, std::memory_order_relaxed);
        return true;
      }
      // A completed wait spends one unit of the budget (the permit path spent it in
      // await_ready).
      void await_resume() noexcept {
        if (waited) coop_proceed();
      }

      explicit Awaiter(Notify* notify) noexcept : n(notify) {}
      Awaiter(Awaiter&& o) noexcept : n(o.n) {}
      ~Awaiter() {
        // Acquire pairs with the notifier's release store of linked=false (its last touch).
        if (node.linked.load(std::memory_order_acquire)) {
          std::lock_guard lk(n->mu_);
          if (node.linked.load(std::memory_order_relaxed)) {
            n->waiters_.remove(&node);
            node.linked.store(false, std::memory_order_relaxed);
            if (n->waiters_.empty()) n->state_.store(kNoPermit, std::memory_order_release);
          }
        }
      }
    };
    return Awaiter{this};
  }

 private:
  // Unlinks the oldest waiter and completes its wait, under the lock and without taking
  // a task reference: while we hold `mu_` the waiter's destructor cannot run, so its task
  // cannot complete and be freed. We are the only completer (we unlinked it), so the wait
  // token needs no CAS. Setting NOTIFIED on an idle task obliges us to queue it, and also
  // pins it (a notified task cannot complete before it is polled), so the queueing can
  // happen after unlocking -- which matters at shutdown, where queueing drops the task and
  // its awaiters' destructors take this lock. Returns the task to queue, if any.
  TaskHeader* complete_head_locked() {
    Waiter* w = waiters_.pop_front();
    if (waiters_.empty()) state_.store(kNoPermit, std::memory_order_release);
    CoroTaskBase* t = w->task;
    // No wait_result: a notification carries none and notified() never reads it.
    // Release: the poll that sees IDLE sees what the notifier wrote before notifying.
    t->wait_token.store(w->gen << 2, std::memory_order_release);
    if (t->diag != nullptr) note_wake(t);
    uint32_t prev = t->state.fetch_or(task_state::kNotified, std::memory_order_acq_rel);
    // Last touch of the waiter: from here its awaiter may be destroyed (release pairs with
    // the destructor's acquire load).
    w->linked.store(false, std::memory_order_release);
    constexpr uint32_t kBusy = task_state::kRunning | task_state::kNotified | task_state::kComplete;
    return (prev & kBusy) == 0 ? t : nullptr;
  }
  // Unlinks the oldest waiter and returns a waker for its task (holding a reference, so
  // the task stays alive until woken even if its awaiter is destroyed once we unlock).
  Waker take_front_locked() {
    Waiter* w = waiters_.pop_front();
    task_ref_inc(w->task);
    Waker waker(w->task, w->gen);
    // Last touch of the waiter: from here its awaiter may be destroyed.
    w->linked.store(false, std::memory_order_release);
    return waker;
  }
  std::atomic<uint32_t> state_{kNoPermit};
  SpinLock mu_;
  WaiterList<Waiter> waiters_;  // under mu_
};

}  // namespace sg::exec
