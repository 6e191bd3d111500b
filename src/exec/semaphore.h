// Async counting semaphore for admission control: no thread ever blocks waiting for a
// permit. Waiters queue in FIFO order up to `max_waiters`; release() hands its permit
// straight to the oldest waiter (so arrivals cannot barge past the queue). A wait can be
// bounded by a timeout source (io::DeadlineTimeout); a waiter that times out, or whose
// task is cancelled, leaves the queue, and a permit granted to it concurrently is given
// back, so no permit is ever lost.
//
// Protocol (all list and permit changes under `mu_`, a spinlock held for pointer moves):
//   * acquire: a permit is taken at once only when permits are free and nobody waits.
//   * release: pops the oldest waiter, marks it granted and wakes it (after unlocking);
//     with no waiter, the permit returns to the pool.
//   * a woken waiter that finds itself granted owns the permit; one that was not granted
//     (timer won) unlinks itself; both checks happen under `mu_`.
#pragma once

#include <atomic>
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

enum class AcquireStatus : uint8_t { kAcquired, kQueueFull, kTimeout };

class Semaphore {
  struct Waiter {
    Waiter* prev;  // WaiterList links
    Waiter* next;
    Waker waker;
    bool linked = false;   // under mu_
    bool granted = false;  // under mu_: a permit was handed to this waiter
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

  void release() {
    std::unique_lock lk(mu_);
    if (Waiter* w = waiters_.front()) {
      unlink_locked(w);
      w->granted = true;
      Waker waker = std::move(w->waker);
      lk.unlock();
      std::move(waker).wake({{}, kGranted});
      return;
    }
    ++available_;
  }

  // co_await sem.acquire(timeout) -> AcquireStatus; on kAcquired call take_permit() (or
  // adopt with Permit(&sem)).
  auto acquire(WaitTimeout* timeout = nullptr) noexcept {
    struct Awaiter {
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
        if (s->waiting_ >= s->max_waiters_) {
          status = AcquireStatus::kQueueFull;
          return true;
        }
        return false;
      }
      bool await_suspend(std::coroutine_handle<> h) {
        Waker w = arm_wait(h);
        std::lock_guard lk(s->mu_);
        // Re-check: a permit may have been released since await_ready.
        if (s->available_ > 0 && s->waiters_.empty()) {
          --s->available_;
          disarm_wait(w.task(), w.generation());
          return false;  // w's reference drops at scope exit
        }
        if (s->waiting_ >= s->max_waiters_) {
          status = AcquireStatus::kQueueFull;
          disarm_wait(w.task(), w.generation());
          return false;
        }
        node.waker = w.clone();
        s->link_locked(&node);
        waited = true;
        // Armed under the lock: every wake source is registered before release() can see
        // the node, and the timeout object (in the caller's frame) is not touched after.
        if (timeout != nullptr) timeout->arm(std::move(w));
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
        if (node.linked) s->unlink_locked(&node);  // the timer won
        return AcquireStatus::kTimeout;
      }
      explicit Awaiter(Semaphore* sem, WaitTimeout* to) noexcept : s(sem), timeout(to) {}
      ~Awaiter() {
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
    return Awaiter(this, timeout);
  }

  std::size_t available() const {
    std::lock_guard lk(mu_);
    return available_;
  }
  std::size_t waiting() const { return waiting_.load(std::memory_order_relaxed); }

 private:
  static constexpr std::size_t kGranted = 7;

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
  std::atomic<std::size_t> waiting_{0};
  WaiterList<Waiter> waiters_;
};

}  // namespace sg::exec
