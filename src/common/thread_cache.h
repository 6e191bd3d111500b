// Free blocks of one kind kept per thread for the next request on that thread (read
// buffers, parsers, OpenSSL's record buffers): taking one back costs a pop instead of an
// allocation, and a block freed on another thread than its allocator's simply joins the
// freeing thread's cache (no lock, no cross-thread traffic). At most Max are kept; the
// user registers a reclaimer that calls clear(), so an idle worker empties it
// (exec/reclaim.h).
//
// Thread exit: the stack is trivially destructible, and a cleaner object (registered the
// first time the thread keeps a block) frees what it holds and closes it when the thread
// exits. A block given back after that (a task destroyed by a later thread-local
// destructor) finds the stack closed and is released, never kept in a dead thread's cache.
#pragma once

#include <cstddef>

namespace sg {

// Tag makes each cache a distinct set of thread-locals; Release frees one block.
template <class Tag, std::size_t Max, void (*Release)(void*) noexcept>
class PerThreadCache {
 public:
  // A kept block, or nullptr.
  static void* take() noexcept {
    Stack& s = stack_;
    return s.n > 0 ? s.blocks[--s.n] : nullptr;
  }
  // Keeps `p`, or returns false when the cache is full or closed: the caller releases it.
  static bool keep(void* p) noexcept {
    Stack& s = stack_;
    if (s.closed || s.n >= Max) return false;
    if (s.n == 0) cleaner_.armed = true;  // registers the cleaner for this thread
    s.blocks[s.n++] = p;
    return true;
  }
  // Releases every kept block; returns how many there were.
  static std::size_t clear() noexcept {
    Stack& s = stack_;
    const std::size_t n = s.n;
    for (std::size_t i = 0; i < n; ++i) Release(s.blocks[i]);
    s.n = 0;
    return n;
  }
  static std::size_t size() noexcept { return stack_.n; }

 private:
  struct Stack {
    void* blocks[Max > 0 ? Max : 1];
    std::size_t n;
    bool closed;
  };
  struct Cleaner {
    bool armed = false;
    ~Cleaner() {
      clear();
      stack_.closed = true;
    }
  };
  static inline thread_local Stack stack_{};
  static inline thread_local Cleaner cleaner_;
};

}  // namespace sg
