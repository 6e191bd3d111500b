// Global injection queue: tasks spawned or woken from outside the runtime's workers, and
// overflow from full local queues. An intrusive FIFO (through TaskHeader::next) under one
// mutex, with batch push (one splice per overflow) and batch pop. Its length is an atomic
// written under the lock and read without it, for the fast "is there anything?" checks
// in the worker loop and for metrics (Tokio's inject.rs does the same).
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>

#include "exec/task.h"

namespace sg::exec {

class InjectQueue {
 public:
  void push(TaskHeader* t) { push_batch(t, t, 1); }

  // Appends the list first..last (linked through next, n tasks) in one critical section.
  void push_batch(TaskHeader* first, TaskHeader* last, std::size_t n) {
    last->next = nullptr;
    std::lock_guard lk(mu_);
    if (tail_ != nullptr) tail_->next = first;
    else head_ = first;
    tail_ = last;
    // Release: a worker that sees the new length and then locks sees the tasks anyway
    // (the mutex orders that); release keeps len monotone for lock-free readers.
    len_.store(len_.load(std::memory_order_relaxed) + n, std::memory_order_release);
  }

  TaskHeader* pop() {
    if (is_empty()) return nullptr;
    std::lock_guard lk(mu_);
    return pop_locked();
  }

  // Pops up to `max` tasks into `out`; returns how many.
  std::size_t pop_n(TaskHeader** out, std::size_t max) {
    if (is_empty() || max == 0) return 0;
    std::lock_guard lk(mu_);
    std::size_t n = 0;
    while (n < max) {
      TaskHeader* t = pop_locked();
      if (t == nullptr) break;
      out[n++] = t;
    }
    return n;
  }

  std::size_t len() const { return len_.load(std::memory_order_acquire); }
  bool is_empty() const { return len() == 0; }

  // Marks the queue closed: workers see it in maintenance and exit. Pushes still succeed
  // (shutdown drains and drops them). Returns true for the call that closed it.
  bool close() { return !closed_.exchange(true, std::memory_order_acq_rel); }
  bool is_closed() const { return closed_.load(std::memory_order_acquire); }

 private:
  TaskHeader* pop_locked() {
    TaskHeader* t = head_;
    if (t == nullptr) return nullptr;
    head_ = t->next;
    if (head_ == nullptr) tail_ = nullptr;
    t->next = nullptr;
    len_.store(len_.load(std::memory_order_relaxed) - 1, std::memory_order_release);
    return t;
  }

  std::mutex mu_;
  TaskHeader* head_ = nullptr;
  TaskHeader* tail_ = nullptr;
  std::atomic<std::size_t> len_{0};
  std::atomic<bool> closed_{false};
};

}  // namespace sg::exec
