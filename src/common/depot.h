// A small store of free objects shared by threads, behind the per-thread caches
// (common/thread_cache.h for blocks, io/string_pool.cpp for strings).
//
// Why: work stealing moves a connection to the other worker between taking its buffers
// and giving them back, so one thread's cache runs empty while another's overflows. A
// full cache puts half of itself here and an empty one takes up to half a cache back:
// one lock per batch instead of a malloc and a free per object.
//
// Invariants: items [0, n) of `items_` are the stored objects, under `mu_`; at most
// Capacity. `size_hint_` mirrors n (written under mu_, read without it): an empty cache
// looks at it before taking the lock, so a thread whose depot is empty pays one relaxed
// load per miss. A stale hint only costs a lock that finds nothing, or a miss that a later
// take will not repeat. The objects themselves pass under the mutex, which orders an
// object's last use on one thread before its reuse on another.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <utility>

namespace sg {

template <class T, std::size_t Capacity>
class Depot {
 public:
  // Moves `k` objects from `from[0..k)` in, all or none; false when there is no room.
  bool put(T* from, std::size_t k) {
    std::lock_guard lk(mu_);
    if (n_ + k > Capacity) return false;
    for (std::size_t i = 0; i < k; ++i) items_[n_++] = std::move(from[i]);
    size_hint_.store(n_, std::memory_order_relaxed);
    return true;
  }
  // Moves up to `max` objects out into `to[0..)`; returns how many.
  std::size_t take(T* to, std::size_t max) {
    if (size_hint_.load(std::memory_order_relaxed) == 0) return 0;
    std::lock_guard lk(mu_);
    const std::size_t k = std::min(max, n_);
    for (std::size_t i = 0; i < k; ++i) to[i] = std::move(items_[--n_]);
    size_hint_.store(n_, std::memory_order_relaxed);
    return k;
  }
  // Hands every stored object to `release` and empties the depot; returns how many.
  template <class Release>
  std::size_t drain(Release&& release) {
    std::lock_guard lk(mu_);
    const std::size_t k = n_;
    while (n_ > 0) release(items_[--n_]);
    size_hint_.store(0, std::memory_order_relaxed);
    return k;
  }
  std::size_t size() {
    std::lock_guard lk(mu_);
    return n_;
  }

 private:
  std::mutex mu_;
  T items_[Capacity > 0 ? Capacity : 1]{};
  std::size_t n_ = 0;
  std::atomic<std::size_t> size_hint_{0};
};

}  // namespace sg
