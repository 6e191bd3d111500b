#include "exec/alloc.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

namespace sg::exec {

namespace {

struct ThreadCache;

struct alignas(16) BlockHeader {
  ThreadCache* owner;  // nullptr: allocated by a thread without a cache
  uint64_t cls;        // size class, or kLarge
};
static_assert(sizeof(BlockHeader) == 16);

constexpr uint64_t kLarge = ~uint64_t{0};

struct FreeBlock {
  FreeBlock* next;
};

FreeBlock* const kClosed = reinterpret_cast<FreeBlock*>(uintptr_t{1});

struct alignas(64) ThreadCache {
  FreeBlock* local[kAllocClasses] = {};
  std::size_t count[kAllocClasses] = {};
  // Written by other threads: kept on its own cache lines.
  alignas(64) std::atomic<FreeBlock*> remote[kAllocClasses] = {};
};

thread_local ThreadCache* tl_cache = nullptr;

// Caches of exited threads. Never freed (a pusher may still read a remote stack head) but
// recycled: a new thread adopts one instead of allocating, so their number is bounded by
// the peak number of threads that ever allocated tasks at once.
std::mutex g_retired_mu;
std::vector<ThreadCache*>* g_retired = nullptr;

ThreadCache* adopt_cache() {
  {
    std::lock_guard lk(g_retired_mu);
    if (g_retired != nullptr && !g_retired->empty()) {
      ThreadCache* tc = g_retired->back();
      g_retired->pop_back();
      // Reopen the remote stacks. A pusher racing with this sees either kClosed (and frees
      // to malloc) or the reopened stack (and hands the block to us, its owner now).
      for (auto& r : tc->remote) r.store(nullptr, std::memory_order_release);
      return tc;
    }
  }
  return new ThreadCache();
}

// Retires the thread's cache when the thread exits (a separate object so that tl_cache
// itself stays a trivially destructible TLS slot with no access guard).
struct CacheRetirer {
  bool armed = false;
  ~CacheRetirer() {
    if (armed) disable_task_cache();
  }
};
thread_local CacheRetirer tl_retirer;

ThreadCache* my_cache() {
  ThreadCache* tc = tl_cache;
  if (tc != nullptr) return tc;
  tc = adopt_cache();
  tl_cache = tc;
  tl_retirer.armed = true;
  return tc;
}

constexpr std::size_t class_of(std::size_t bytes) {
  return bytes == 0 ? 0 : (bytes - 1) / kAllocClassBytes;
}

BlockHeader* header_of(void* user) { return static_cast<BlockHeader*>(user) - 1; }
// The free-list link lives in the user area; the header (owner, class) stays intact.
FreeBlock* as_free(BlockHeader* h) { return reinterpret_cast<FreeBlock*>(h + 1); }
BlockHeader* as_header(FreeBlock* b) { return reinterpret_cast<BlockHeader*>(b) - 1; }

void* fresh(ThreadCache* owner, uint64_t cls, std::size_t user_bytes) {
  void* raw = std::malloc(sizeof(BlockHeader) + user_bytes);
  if (raw == nullptr) throw std::bad_alloc();
  auto* h = static_cast<BlockHeader*>(raw);
  h->owner = owner;
  h->cls = cls;
  return h + 1;
}

void push_remote(ThreadCache* owner, std::size_t c, BlockHeader* h) {
  FreeBlock* b = as_free(h);
  FreeBlock* head = owner->remote[c].load(std::memory_order_relaxed);
  for (;;) {
    if (head == kClosed) {  // the owner exited: nobody will take it back
      std::free(h);
      return;
    }
    b->next = head;
    // Release publishes b->next to the owner's acquire exchange.
    if (owner->remote[c].compare_exchange_weak(head, b, std::memory_order_release,
                                               std::memory_order_relaxed)) {
      return;
    }
  }
}

}  // namespace

void* task_alloc(std::size_t bytes) {
  std::size_t c = class_of(bytes);
  if (c >= kAllocClasses) return fresh(nullptr, kLarge, bytes);
  ThreadCache* tc = my_cache();
  FreeBlock* b = tc->local[c];
  if (b == nullptr) {
    // Refill from what other threads gave back, all at once.
    b = tc->remote[c].exchange(nullptr, std::memory_order_acquire);
    if (b == nullptr) return fresh(tc, c, (c + 1) * kAllocClassBytes);
    std::size_t n = 0;
    for (FreeBlock* p = b; p != nullptr; p = p->next) ++n;
    tc->count[c] = n;
  }
  tc->local[c] = b->next;
  --tc->count[c];
  return b;  // the user area starts where the link was
}

void task_free(void* p, std::size_t /*bytes*/) noexcept {
  if (p == nullptr) return;
  BlockHeader* h = header_of(p);
  if (h->cls == kLarge || h->owner == nullptr) {
    std::free(h);
    return;
  }
  std::size_t c = static_cast<std::size_t>(h->cls);
  ThreadCache* tc = tl_cache;
  if (h->owner == tc) {
    if (tc->count[c] >= kAllocCacheDepth) {
      std::free(h);
      return;
    }
    FreeBlock* b = as_free(h);
    b->next = tc->local[c];
    tc->local[c] = b;
    ++tc->count[c];
    return;
  }
  push_remote(h->owner, c, h);
}

void enable_task_cache() { my_cache(); }

void disable_task_cache() noexcept {
  ThreadCache* tc = tl_cache;
  if (tc == nullptr) return;
  tl_cache = nullptr;
  tl_retirer.armed = false;
  for (std::size_t c = 0; c < kAllocClasses; ++c) {
    while (FreeBlock* b = tc->local[c]) {
      tc->local[c] = b->next;
      std::free(as_header(b));
    }
    tc->count[c] = 0;
    FreeBlock* r = tc->remote[c].exchange(kClosed, std::memory_order_acquire);
    while (r != nullptr) {
      FreeBlock* next = r->next;
      std::free(as_header(r));
      r = next;
    }
  }
  std::lock_guard lk(g_retired_mu);
  if (g_retired == nullptr) g_retired = new std::vector<ThreadCache*>();
  g_retired->push_back(tc);
}

}  // namespace sg::exec
