// Free blocks of one kind kept per thread for the next request on that thread (read
// buffers, parsers, OpenSSL's record buffers): taking one back costs a pop instead of an
// allocation. At most Max are kept per thread; a full stack moves half of itself to a
// depot shared by the threads (common/depot.h, at most Max blocks), where an empty one
// finds them: work stealing frees a connection's blocks on the worker that did not take
// them (measured: 2% of parser takes missed without it, each a new parser whose maps then
// allocated again). A block is freed only when the depot is full too. The user registers
// a reclaimer that calls clear(), so an idle worker empties the stack and the depot
// (exec/reclaim.h).
//
// Thread exit: the stack is trivially destructible, and a cleaner object (registered the
// first time the thread keeps a block) frees what it holds and closes it when the thread
// exits. A block given back after that (a task destroyed by a later thread-local
// destructor) finds the stack closed and is released, never kept in a dead thread's cache.
#pragma once

#include <cstddef>

#include "common/depot.h"

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
  static std::size_t clear() noexcept { return clear_local() + depot_.drain([](void* p) { Release(p); }); }
  static std::size_t size() noexcept { return stack_.n; }
  static std::size_t depot_size() noexcept { return depot_.size(); }

 private:
  static constexpr std::size_t kBatch = Max / 2;

  struct Stack {
    void* blocks[Max > 0 ? Max : 1];
    std::size_t n;
    bool closed;
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
    if (kBatch == 0 || !depot_.put(s.blocks + s.n - kBatch, kBatch)) return false;
    s.n -= kBatch;
    return true;
  }
  // Fills an empty stack with up to half a stack from the depot.
  static bool refill(Stack& s) noexcept {
    if (kBatch == 0) return false;
    s.n = depot_.take(s.blocks, kBatch);
    if (s.n == 0) return false;
    cleaner_.armed = true;
    return true;
  }

  static inline thread_local Stack stack_{};
  static inline thread_local Cleaner cleaner_;
  static inline Depot<void*, Max> depot_;
};

}  // namespace sg
