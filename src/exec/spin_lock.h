// SpinLock for critical sections of a few pointer updates (waiter lists of Notify and
// Semaphore). An uncontended lock/unlock is one exchange and one store, against ~90
// instructions for pthread_mutex. Contention spins on a plain load (no cache-line
// ping-pong) with `pause`, then yields the CPU so a preempted holder can finish: never
// hold it across anything that can block.
#pragma once

#include <atomic>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace sg::exec {

class SpinLock {
 public:
  void lock() noexcept {
    for (;;) {
      // Acquire pairs with the release in unlock(): the previous holder's writes are seen.
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      for (unsigned spins = 0; locked_.load(std::memory_order_relaxed); ++spins) {
        if (spins < 64) {
          cpu_relax();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  static void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
  }
  std::atomic<bool> locked_{false};
};

}  // namespace sg::exec
