// Async counting semaphore for admission control: no thread ever blocks waiting for a
// permit. Waiters queue up to `max_waiters`; release() hands its permit straight to a
// waiter (so arrivals cannot barge past the queue). A wait can be bounded by a timeout
// source (io::DeadlineTimeout); a waiter that times out, or whose task is cancelled, leaves
// the queue, and a permit granted to it concurrently is given back, so no permit is ever
// lost.
//
// Order: FIFO, or adaptive LIFO (set_lifo_after; Facebook's "Fail at Scale", ACM Queue
// 2015). In FIFO order release() grants the oldest waiter and an arrival that finds the
// queue full is refused. With adaptive LIFO the queue stays FIFO while it drains quickly;
// once its oldest waiter has waited `lifo_after` (a standing queue: demand exceeds the
// permits), release() grants the newest waiter instead, and an arrival that finds the
// queue full pushes the oldest one out (it is woken with kDisplaced). Under a standing
// queue FIFO makes every admitted request pay the whole queue wait, up to the timeout;
// serving the newest keeps the admitted requests' wait near zero while the others age out
// at their timeout (a bounded, paced 503 instead of a late 200).
//
// Protocol (all list and permit changes under `mu_`, a spinlock held for pointer moves):
//   * acquire: a permit is taken at once only when permits are free and nobody waits.
//   * release: unlinks the oldest (or, standing, the newest) waiter, marks it granted and
//     wakes it (after unlocking); with no waiter, the permit returns to the pool.
//   * a full standing queue under adaptive LIFO: the arrival unlinks the oldest waiter,
//     marks it displaced and wakes it (after unlocking), then links itself.
//   * a woken waiter that finds itself granted owns the permit; one that is still linked
//     (timer won) unlinks itself; both checks happen under `mu_`.
//   * the timeout is armed after `mu_` is released; the waiter's task is still running
//     then, so no wake can resume it before arming is done.
#pragma once

#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "exec/coro.h"
#include "exec/spin_lock.h"
#include "exec/waiter_list.h"

namespace sg::exec {

// Something that completes a wait after a while (a timer). arm() is given a clone of the
// waiter's waker; cancel() is called once the wait is over.
class WaitTimeout {
 public:
  virtual ~WaitTimeout() = default;
  virtual void arm(Waker w) = 0;
  virtual void cancel() = 0;
};

// kDisplaced: pushed out of a full standing queue by a newer arrival (adaptive LIFO).
enum class AcquireStatus : uint8_t { kAcquired, kQueueFull, kTimeout, kDisplaced };

class Semaphore {
  struct Waiter {
    Waiter* prev;  // WaiterList links
    Waiter* next;
    Waker waker;
    bool linked = false;   // under mu_
    bool granted = false;  // under mu_: a permit was handed to this waiter
    bool displaced = false;  // under mu_: pushed out of a full standing queue
    int64_t enqueued_ns = 0;  // steady clock, when it joined the queue
  };

 public:
  class Permit {
   public:
    Permit() = default;
    explicit Permit(Semaphore* s) : s_(s) {}
    Permit(Permit&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
    Permit& operator=(Permit&& o) noexcept {
      if (this != &o) {
        reset();
        s_ = std::exchange(o.s_, nullptr);
      }
      return *this;
    }
    ~Permit() { reset(); }
    explicit operator bool() const { return s_ != nullptr; }
    void reset() {
      if (s_ != nullptr) std::exchange(s_, nullptr)->release();
    }

   private:
    Semaphore* s_ = nullptr;
  };

  Semaphore(std::size_t permits, std::size_t max_waiters) : available_(permits), max_waiters_(max_waiters) {}
  Semaphore(const Semaphore&) = delete;
  Semaphore& operator=(const Semaphore&) = delete;

  bool try_acquire() {
    std::lock_guard lk(mu_);
    if (available_ == 0 || !waiters_.empty()) return false;
    --available_;
    return true;
  }

  // Adaptive LIFO (see the header comment): serve newest-first while the oldest waiter
  // has waited `after` or longer; 0 = always FIFO. Relaxed: read under mu_, a change takes
  // effect at the next release or arrival.
  void set_lifo_after(std::chrono::nanoseconds after) {
    lifo_after_ns_.store(after.count(), std::memory_order_relaxed);
  }

  void release() {
    std::unique_lock lk(mu_);
    if (Waiter* w = standing_locked() ? waiters_.back() : waiters_.front()) {
      unlink_locked(w);
      w->granted = true;
      Waker waker = std::move(w->waker);
      lk.unlock();
      std::move(waker).wake({{}, kGranted});
      return;
    }
    ++available_;
  }

  // What acquire() returns: a queue node in the awaiting task's frame.
  struct AcquireAwaiter {
    Semaphore* s;
    WaitTimeout* timeout;
    Waiter node;
    AcquireStatus status = AcquireStatus::kAcquired;
    bool waited = false;

    bool await_ready() noexcept {
      std::lock_guard lk(s->mu_);
      if (s->available_ > 0 && s->waiters_.empty()) {
        --s->available_;
        return true;
      }
      if (s->waiting_ >= s->max_waiters_ && !s->standing_locked()) {
        status = AcquireStatus::kQueueFull;
        return true;
      }
      return false;
    }
    bool await_suspend(std::coroutine_handle<> h) {
      Waker w = arm_wait(h);
      Waker displaced;  // the oldest waiter's, when this arrival pushes it out
      // Only adaptive LIFO needs the enqueue time (waiters queued before it was switched on
      // count as old); read before locking (the lock is held for pointer moves only).
      if (s->lifo_after_ns_.load(std::memory_order_relaxed) > 0) node.enqueued_ns = now_ns();
      {
        std::lock_guard lk(s->mu_);
        // Re-check: a permit may have been released since await_ready.
        if (s->available_ > 0 && s->waiters_.empty()) {
          --s->available_;
          disarm_wait(w.task(), w.generation());
          return false;  // w's reference drops at scope exit
        }
        if (s->waiting_ >= s->max_waiters_) {
          Waiter* oldest = s->standing_locked() ? s->waiters_.front() : nullptr;
          if (oldest == nullptr) {
            status = AcquireStatus::kQueueFull;
            disarm_wait(w.task(), w.generation());
            return false;
          }
          s->unlink_locked(oldest);
          oldest->displaced = true;
          displaced = std::move(oldest->waker);
        }
        node.waker = w.clone();
        s->link_locked(&node);
        waited = true;
      }
      // Armed after unlocking: arming a timer or a socket wait takes the reactor's locks
      // and may be a syscall (epoll_ctl), which must not stretch a spin lock's critical
      // section. A release() that grants the node first is harmless: this task is still
      // running, so the wake only re-polls it after this poll returns, and await_resume
      // cancels the timer; the timeout object (in the caller's frame) outlives the wait.
      if (timeout != nullptr) timeout->arm(std::move(w));
      if (displaced) std::move(displaced).wake({{}, kDisplacedWake});
      return true;
    }
    AcquireStatus await_resume() {
      if (!waited) return status;
      if (timeout != nullptr) timeout->cancel();
      std::lock_guard lk(s->mu_);
      if (node.granted) {
        node.granted = false;  // the permit now belongs to the caller
        return AcquireStatus::kAcquired;
      }
      if (node.displaced) return AcquireStatus::kDisplaced;
      if (node.linked) s->unlink_locked(&node);  // the timer won
      return AcquireStatus::kTimeout;
    }
    explicit AcquireAwaiter(Semaphore* sem, WaitTimeout* to) noexcept : s(sem), timeout(to) {}
    ~AcquireAwaiter() {
      if (!waited) return;
      // Dropped while queued (task cancelled), or granted but never resumed: leave the
      // queue and give back a permit that was granted but never taken.
      std::unique_lock lk(s->mu_);
      if (node.linked) s->unlink_locked(&node);
      bool give_back = node.granted;
      node.granted = false;
      lk.unlock();
      if (give_back) s->release();
    }
  };

  // co_await sem.acquire(timeout) -> AcquireStatus; on kAcquired call take_permit() (or
  // adopt with Permit(&sem)).
  AcquireAwaiter acquire(WaitTimeout* timeout = nullptr) noexcept { return AcquireAwaiter(this, timeout); }

  std::size_t available() const {
    std::lock_guard lk(mu_);
    return available_;
  }
  std::size_t waiting() const { return waiting_.load(std::memory_order_relaxed); }

 private:
  static constexpr std::size_t kGranted = 7;
  static constexpr std::size_t kDisplacedWake = 8;

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // Under mu_: the oldest waiter has waited lifo_after or longer (reads the clock only
  // when adaptive LIFO is on and someone waits).
  bool standing_locked() const {
    const int64_t after = lifo_after_ns_.load(std::memory_order_relaxed);
    const Waiter* oldest = waiters_.front();
    return after > 0 && oldest != nullptr && now_ns() - oldest->enqueued_ns >= after;
  }

  void link_locked(Waiter* w) {
    waiters_.push_back(w);
    w->linked = true;
    waiting_.fetch_add(1, std::memory_order_relaxed);
  }
  void unlink_locked(Waiter* w) {
    waiters_.remove(w);
    w->linked = false;
    waiting_.fetch_sub(1, std::memory_order_relaxed);
  }

  mutable SpinLock mu_;
  std::size_t available_;
  const std::size_t max_waiters_;
  std::atomic<int64_t> lifo_after_ns_{0};
  std::atomic<std::size_t> waiting_{0};
  WaiterList<Waiter> waiters_;
};

}  // namespace sg::exec
