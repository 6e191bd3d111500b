// Per-worker local run queue: a bounded single-producer / multi-consumer ring (Tokio's
// queue.rs protocol), split into an owner handle and a copyable stealer handle.
//
// Invariants (indices are free-running u32 counters; slots are `index & (Capacity - 1)`):
//   * `tail` is written only by the owner (release store) and read by stealers (acquire).
//   * `head` packs two indices, `steal` (high 32 bits) and `real` (low 32 bits).
//     - `real` is the next task to hand out; owner pops and stealers claim by advancing it.
//     - `steal` trails `real` while a stealer copies its claimed batch [steal, real);
//       `steal == real` means no steal is in progress.
//     - Slots in [steal, tail) are occupied. The owner checks capacity against `steal`
//       (not `real`), so it never overwrites a slot a stealer is still copying.
//   * Only one steal can be in progress (a thief seeing steal != real gives up), so a
//     batch claim is two CASes: claim (advance real) and release (steal = real).
//   * ABA: head packs two u32 halves in a u64; an index would have to wrap 2^32 times
//     between a thief's load and its CAS for a stale CAS to succeed.
//   * The owner never blocks on a stealer: pop CASes only `real`, and when it finds a steal
//     in progress on a full queue it sends the new task to the injection queue instead.
// Memory orders: a task pointer written into a slot by the owner is published by the
// release store of `tail`; stealers acquire `tail` before reading slots. A stealer's
// release CAS on `head` (after copying) pairs with the owner's acquire load of `head`
// before it reuses those slots. Slots are relaxed atomics so that TSan sees no plain race
// on the (protocol-exclusive) cells.
#pragma once

#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "exec/config.h"
#include "exec/stats.h"

namespace sg::exec {

template <class T, uint32_t Capacity = kLocalQueueCapacity>
class LocalQueue;
template <class T, uint32_t Capacity = kLocalQueueCapacity>
class Stealer;

namespace detail {

template <class T, uint32_t Capacity>
struct alignas(64) QueueInner {
  static_assert(Capacity >= 2 && (Capacity & (Capacity - 1)) == 0, "power of two");
  static constexpr uint32_t kMask = Capacity - 1;

  static constexpr uint64_t pack(uint32_t steal, uint32_t real) {
    return (static_cast<uint64_t>(steal) << 32) | real;
  }
  static constexpr uint32_t steal_of(uint64_t h) { return static_cast<uint32_t>(h >> 32); }
  static constexpr uint32_t real_of(uint64_t h) { return static_cast<uint32_t>(h); }

  // Concurrently updated by the owner (pop, overflow) and stealers.
  alignas(64) std::atomic<uint64_t> head{0};
  // Written only by the owner; read by stealers and metrics.
  alignas(64) std::atomic<uint32_t> tail{0};
  alignas(64) std::atomic<T*> buffer[Capacity] = {};

  // Tasks available to pop or steal (approximate when read by another thread).
  uint32_t len() const {
    uint32_t real = real_of(head.load(std::memory_order_acquire));
    return tail.load(std::memory_order_acquire) - real;
  }
};

}  // namespace detail

// Owner handle: exactly one worker holds it; push/pop never lock or allocate.
template <class T, uint32_t Capacity>
class LocalQueue {
  using Inner = detail::QueueInner<T, Capacity>;

 public:
  static constexpr uint32_t kCapacity = Capacity;
  // Overflow moves half the queue plus the new task (Tokio: NUM_TASKS_TAKEN = cap / 2).
  static constexpr uint32_t kOverflowBatch = Capacity / 2;

  LocalQueue() : inner_(std::make_shared<Inner>()) {}
  // Starts the free-running indices at `start` (tests use values near 2^32 to exercise
  // wrap-around without pushing four billion tasks).
  explicit LocalQueue(uint32_t start) : inner_(std::make_shared<Inner>()) {
    inner_->head.store(Inner::pack(start, start), std::memory_order_relaxed);
    inner_->tail.store(start, std::memory_order_relaxed);
  }
  LocalQueue(LocalQueue&&) noexcept = default;
  LocalQueue& operator=(LocalQueue&&) noexcept = default;
  LocalQueue(const LocalQueue&) = delete;
  LocalQueue& operator=(const LocalQueue&) = delete;

  Stealer<T, Capacity> stealer() const { return Stealer<T, Capacity>(inner_); }

  uint32_t len() const { return inner_->len(); }
  bool has_tasks() const { return len() != 0; }

  // Free slots, counted against `steal` so that an in-progress steal counts as occupied.
  uint32_t remaining_slots() const {
    uint32_t steal = Inner::steal_of(inner_->head.load(std::memory_order_acquire));
    uint32_t tail = inner_->tail.load(std::memory_order_relaxed);
    return Capacity - (tail - steal);
  }

  // Pushes to the back. When the queue is full, moves half of it plus `task` to
  // `overflow` in one batch (`overflow.push_batch(first, last, n)`; tasks linked through
  // `T::next`). Returns true when an overflow happened.
  template <class Overflow>
  bool push_back_or_overflow(T* task, Overflow& overflow, WorkerCounters* stats = nullptr) {
    uint32_t tail;
    for (;;) {
      uint64_t head = inner_->head.load(std::memory_order_acquire);
      uint32_t steal = Inner::steal_of(head);
      uint32_t real = Inner::real_of(head);
      // Only this thread writes tail.
      tail = inner_->tail.load(std::memory_order_relaxed);
      if (tail - steal < Capacity) break;  // room
      if (steal != real) {
        // A thief is copying a batch out and will free room; don't wait for it.
        task->next = nullptr;
        overflow.push_batch(task, task, 1);
        return false;
      }
      if (push_overflow(task, real, tail, overflow)) {
        if (stats != nullptr) ++stats->overflows;
        return true;
      }
      // Lost a race with a thief; the queue may have room now.
    }
    finish_push(task, tail);
    return false;
  }

  // Pushes tasks known to fit (caller checked remaining_slots()).
  void push_back_batch(T* const* tasks, uint32_t n) {
    uint32_t tail = inner_->tail.load(std::memory_order_relaxed);
    assert(n <= remaining_slots());
    for (uint32_t i = 0; i < n; ++i) {
      inner_->buffer[(tail + i) & Inner::kMask].store(tasks[i], std::memory_order_relaxed);
    }
    // Publishes the slots; pairs with the acquire load of tail in steal_into / len.
    inner_->tail.store(tail + n, std::memory_order_release);
  }

  T* pop() {
    uint64_t head = inner_->head.load(std::memory_order_acquire);
    for (;;) {
      uint32_t steal = Inner::steal_of(head);
      uint32_t real = Inner::real_of(head);
      uint32_t tail = inner_->tail.load(std::memory_order_relaxed);
      if (real == tail) return nullptr;
      uint32_t next_real = real + 1;
      // With no steal in progress both halves advance together; otherwise only `real`
      // moves and the thief later sets steal = real.
      uint64_t next = steal == real ? Inner::pack(next_real, next_real)
                                    : Inner::pack(steal, next_real);
      // acq_rel: acquire orders the slot read after a thief's release of its claim;
      // release is not needed for correctness but keeps the CAS symmetric with thieves.
      if (inner_->head.compare_exchange_weak(head, next, std::memory_order_acq_rel,
                                             std::memory_order_acquire)) {
        return inner_->buffer[real & Inner::kMask].load(std::memory_order_relaxed);
      }
    }
  }

 private:
  friend class Stealer<T, Capacity>;

  void finish_push(T* task, uint32_t tail) {
    inner_->buffer[tail & Inner::kMask].store(task, std::memory_order_relaxed);
    // Makes the task visible to thieves; pairs with the acquire load in steal_into2.
    inner_->tail.store(tail + 1, std::memory_order_release);
  }

  // Claims the oldest kOverflowBatch tasks with one CAS (only possible when no steal is in
  // progress and the queue is exactly full), links them plus `task`, and hands the list to
  // the overflow queue under a single lock acquisition. Tokio moves the oldest half too:
  // they have waited longest, and the injection queue is checked by every worker.
  template <class Overflow>
  bool push_overflow(T* task, uint32_t head, [[maybe_unused]] uint32_t tail, Overflow& overflow) {
    assert(tail - head == Capacity);
    uint64_t expected = Inner::pack(head, head);
    uint32_t new_head = head + kOverflowBatch;
    // Relaxed would do for the claim itself: every task in the range was pushed by this
    // thread. Release orders it for thieves that load head afterwards.
    if (!inner_->head.compare_exchange_strong(expected, Inner::pack(new_head, new_head),
                                              std::memory_order_release,
                                              std::memory_order_relaxed)) {
      return false;
    }
    T* first = inner_->buffer[head & Inner::kMask].load(std::memory_order_relaxed);
    T* last = first;
    for (uint32_t i = 1; i < kOverflowBatch; ++i) {
      T* t = inner_->buffer[(head + i) & Inner::kMask].load(std::memory_order_relaxed);
      last->next = t;
      last = t;
    }
    last->next = task;
    task->next = nullptr;
    overflow.push_batch(first, task, kOverflowBatch + 1);
    return true;
  }

  std::shared_ptr<Inner> inner_;
};

// Thread-safe, copyable handle used by other workers to steal and by metrics to read depth.
template <class T, uint32_t Capacity>
class Stealer {
  using Inner = detail::QueueInner<T, Capacity>;

 public:
  Stealer() = default;

  uint32_t len() const { return inner_ ? inner_->len() : 0; }
  bool is_empty() const { return len() == 0; }

  // Steals half the tasks (rounded up, at most Capacity / 2) into `dst` in one operation
  // and returns one of them to run at once; nullptr when nothing was stolen. Counts steals
  // into `stats` when given.
  T* steal_into(LocalQueue<T, Capacity>& dst, WorkerCounters* stats = nullptr) const {
    Inner& d = *dst.inner_;
    uint32_t dst_tail = d.tail.load(std::memory_order_relaxed);  // dst's owner is us
    // If someone is stealing from dst right now, dst may hold claimed slots; only steal
    // when at least half of dst is certainly free.
    uint32_t dst_steal = Inner::steal_of(d.head.load(std::memory_order_acquire));
    if (dst_tail - dst_steal > Capacity / 2) return nullptr;

    uint32_t n = steal_into2(d, dst_tail);
    if (n == 0) return nullptr;
    if (stats != nullptr) {
      stats->steals += n;
      ++stats->steal_operations;
    }
    --n;  // the last stolen task is returned instead of being exposed in dst
    T* ret = d.buffer[(dst_tail + n) & Inner::kMask].load(std::memory_order_relaxed);
    if (n != 0) d.tail.store(dst_tail + n, std::memory_order_release);
    return ret;
  }

 private:
  friend class LocalQueue<T, Capacity>;
  explicit Stealer(std::shared_ptr<Inner> inner) : inner_(std::move(inner)) {}

  uint32_t steal_into2(Inner& d, uint32_t dst_tail) const {
    Inner& s = *inner_;
    uint64_t prev = s.head.load(std::memory_order_acquire);
    uint64_t next;
    uint32_t n;
    for (;;) {
      uint32_t src_steal = Inner::steal_of(prev);
      uint32_t src_real = Inner::real_of(prev);
      // Pairs with the owner's release store of tail: the slots below it are written.
      uint32_t src_tail = s.tail.load(std::memory_order_acquire);
      if (src_steal != src_real) return 0;  // another thief is mid-steal
      n = src_tail - src_real;
      n -= n / 2;
      if (n == 0) return 0;
      // Claim [real, real + n) by advancing only `real`; `steal` stays behind until the
      // copy is done so the owner does not reuse those slots.
      next = Inner::pack(src_steal, src_real + n);
      if (s.head.compare_exchange_weak(prev, next, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        break;
      }
    }
    assert(n <= Capacity / 2);
    uint32_t first = Inner::steal_of(next);
    for (uint32_t i = 0; i < n; ++i) {
      T* t = s.buffer[(first + i) & Inner::kMask].load(std::memory_order_relaxed);
      d.buffer[(dst_tail + i) & Inner::kMask].store(t, std::memory_order_relaxed);
    }
    // Release the claim: steal = real. The owner may have popped (advanced real) in the
    // meantime, so loop on the current value. Release pairs with the owner's acquire of
    // head before it reuses these slots.
    prev = next;
    for (;;) {
      uint32_t real = Inner::real_of(prev);
      if (s.head.compare_exchange_weak(prev, Inner::pack(real, real), std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        return n;
      }
      assert(Inner::steal_of(prev) != Inner::real_of(prev));
    }
  }

  std::shared_ptr<Inner> inner_;
};

}  // namespace sg::exec
