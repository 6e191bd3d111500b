// Free blocks of one kind kept per thread for the next request on that thread (read
// buffers, parsers, OpenSSL's record buffers): taking one back costs a pop instead of an
// allocation. At most Max are kept per thread; the user registers a reclaimer that calls
// clear(), so an idle worker empties them (exec/reclaim.h).
//
// Blocks drift between threads: work stealing moves a connection to the other worker
// between taking its blocks and giving them back, so one thread's stack runs empty while
// another's overflows (measured: 2% of parser takes missed, each a new parser whose maps
// then allocated again). A full stack therefore moves half of itself to a shared depot
// (one mutex, at most Max blocks), and an empty one takes up to half a stack from there:
// one lock per Max/2 blocks, and a block is freed only when the depot is full too.
//
// Thread exit: the stack is trivially destructible, and a cleaner object (registered the
// first time the thread keeps a block) frees what it holds and closes it when the thread
// exits. A block given back after that (a task destroyed by a later thread-local
// destructor) finds the stack closed and is released, never kept in a dead thread's cache.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <mutex>

namespace sg {

// Tag makes each cache a distinct set of thread-locals; Release frees one block.
template <class Tag, std::size_t Max, void (*Release)(void*) noexcept>
class PerThreadCache {
 public:
  // A kept block, or nullptr.
  static void* take() noexcept {
    Stack& s = stack_;
    if (s.n == 0 && (s.closed || !refill(s))) return nullptr;
    return s.blocks[--s.n];
  }
  // Keeps `p`, or returns false when this thread's stack and the depot are full, or the
  // stack is closed: the caller releases it.
  static bool keep(void* p) noexcept {
    Stack& s = stack_;
    if (s.closed || Max == 0) return false;
    if (s.n >= Max && !spill(s)) return false;
    if (s.n == 0) cleaner_.armed = true;  // registers the cleaner for this thread
    s.blocks[s.n++] = p;
    return true;
  }
  // Releases every block this thread keeps and every block in the depot; returns how many.
  static std::size_t clear() noexcept {
    std::size_t n = clear_local();
    std::lock_guard lk(depot_.mu);
    for (std::size_t i = 0; i < depot_.n; ++i) Release(depot_.blocks[i]);
    n += depot_.n;
    depot_.n = 0;
    depot_.size_hint.store(0, std::memory_order_relaxed);
    return n;
  }
  static std::size_t size() noexcept { return stack_.n; }
  static std::size_t depot_size() noexcept {
    std::lock_guard lk(depot_.mu);
    return depot_.n;
  }

 private:
  static constexpr std::size_t kBatch = Max / 2;

  struct Stack {
    void* blocks[Max > 0 ? Max : 1];
    std::size_t n;
    bool closed;
  };
  // Guarded by mu. size_hint mirrors n (written under mu, read without it): an empty
  // stack looks at it before taking the lock, so a thread whose depot is empty pays one
  // relaxed load per miss. A stale hint only costs a lock that finds nothing, or a miss
  // that a later take will not repeat; the blocks themselves pass under the mutex, which
  // orders a block's last use on one thread before its reuse on another.
  struct Depot {
    std::mutex mu;
    void* blocks[Max > 0 ? Max : 1];
    std::size_t n = 0;
    std::atomic<std::size_t> size_hint{0};
  };
  struct Cleaner {
    bool armed = false;
    ~Cleaner() {
      clear_local();
      stack_.closed = true;
    }
  };

  static std::size_t clear_local() noexcept {
    Stack& s = stack_;
    const std::size_t n = s.n;
    for (std::size_t i = 0; i < n; ++i) Release(s.blocks[i]);
    s.n = 0;
    return n;
  }
  // Moves the top half of a full stack into the depot, if it has room.
  static bool spill(Stack& s) noexcept {
    if constexpr (kBatch == 0) {
      return false;
    } else {
      std::lock_guard lk(depot_.mu);
      if (depot_.n + kBatch > Max) return false;
      s.n -= kBatch;
      std::memcpy(depot_.blocks + depot_.n, s.blocks + s.n, kBatch * sizeof(void*));
      depot_.n += kBatch;
      depot_.size_hint.store(depot_.n, std::memory_order_relaxed);
      return true;
    }
  }
  // Fills an empty stack with up to half a stack from the depot.
  static bool refill(Stack& s) noexcept {
    if constexpr (kBatch == 0) {
      return false;
    } else {
      if (depot_.size_hint.load(std::memory_order_relaxed) == 0) return false;
      std::lock_guard lk(depot_.mu);
      const std::size_t k = std::min(kBatch, depot_.n);
      if (k == 0) return false;
      depot_.n -= k;
      std::memcpy(s.blocks, depot_.blocks + depot_.n, k * sizeof(void*));
      depot_.size_hint.store(depot_.n, std::memory_order_relaxed);
      s.n = k;
      cleaner_.armed = true;
      return true;
    }
  }

  static inline thread_local Stack stack_{};
  static inline thread_local Cleaner cleaner_;
  static inline Depot depot_;
};

}  // namespace sg
