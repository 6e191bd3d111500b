#include "exec/alloc.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

namespace sg::exec {

namespace {

#if defined(__SANITIZE_ADDRESS__)
// Under AddressSanitizer every block is a separate malloc so that use-after-free and
// double free of task memory are caught instead of hidden inside the pool.
constexpr bool kPooled = false;
#else
constexpr bool kPooled = true;
#endif

struct ThreadCache;

struct alignas(16) BlockHeader {
  ThreadCache* owner;  // nullptr: not pooled (large, or pooling disabled)
  uint64_t cls;
};
static_assert(sizeof(BlockHeader) == 16);

struct FreeBlock {
  FreeBlock* next;
};

struct alignas(64) ThreadCache {
  FreeBlock* local[kAllocClasses] = {};
  // The slabs carved for each class, for trim (owner only).
  std::vector<char*> slabs[kAllocClasses];
  // Written by other threads: kept on its own cache lines.
  alignas(64) std::atomic<FreeBlock*> remote[kAllocClasses] = {};
};

thread_local ThreadCache* tl_cache = nullptr;

// Caches of exited threads, with the blocks they own. Never freed (their blocks are
// pooled and other threads may still push to their remote stacks) but adopted by new
// threads, so their number is bounded by the peak number of allocating threads.
std::mutex g_retired_mu;
std::vector<ThreadCache*>* g_retired = nullptr;

ThreadCache* adopt_cache() {
  {
    std::lock_guard lk(g_retired_mu);
    if (g_retired != nullptr && !g_retired->empty()) {
      ThreadCache* tc = g_retired->back();
      g_retired->pop_back();
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

constexpr std::size_t kSmallMax = kAllocSmallClasses * kAllocClassBytes;  // 1 KiB

constexpr std::size_t class_of(std::size_t bytes) {
  if (bytes <= kSmallMax) return bytes == 0 ? 0 : (bytes - 1) / kAllocClassBytes;
  return kAllocSmallClasses + (bytes - kSmallMax - 1) / kAllocLargeStep;
}
constexpr std::size_t class_bytes(std::size_t c) {
  return c < kAllocSmallClasses ? (c + 1) * kAllocClassBytes : kSmallMax + (c - kAllocSmallClasses + 1) * kAllocLargeStep;
}
constexpr std::size_t block_bytes(std::size_t c) { return sizeof(BlockHeader) + class_bytes(c); }
static_assert(class_of(1) == 0 && class_of(64) == 0 && class_of(65) == 1 && class_of(1024) == 15);
static_assert(class_of(1025) == 16 && class_bytes(16) == 1280 && class_of(1280) == 16 && class_of(1281) == 17);
static_assert(class_of(kAllocMaxPooled) == kAllocClasses - 1 && class_bytes(kAllocClasses - 1) == kAllocMaxPooled);
static_assert(class_of(kAllocMaxPooled + 1) == kAllocClasses);

// The free-list link lives in the user area; the header (owner, class) stays intact.
FreeBlock* as_free(BlockHeader* h) { return reinterpret_cast<FreeBlock*>(h + 1); }
BlockHeader* as_header(void* user) { return static_cast<BlockHeader*>(user) - 1; }

void* unpooled(std::size_t user_bytes, uint64_t cls) {
  void* raw = std::malloc(sizeof(BlockHeader) + user_bytes);
  if (raw == nullptr) throw std::bad_alloc();
  auto* h = static_cast<BlockHeader*>(raw);
  h->owner = nullptr;
  h->cls = cls;
  return h + 1;
}

constexpr std::size_t slab_blocks(std::size_t c) { return std::max<std::size_t>(8, kAllocSlabBytes / block_bytes(c)); }
constexpr std::size_t slab_bytes(std::size_t c) { return slab_blocks(c) * block_bytes(c); }

// Slabs are mappings of their own, not malloc chunks. Malloc'ed, the long-lived slabs of
// a worker's connections sat between the chunks of its requests' short-lived allocations
// (header vectors, strings) in the same malloc arena, so the pages around them stayed
// resident after those were freed: malloc_trim can give back only whole free pages. 10k
// idle connections held after 200 at a time were set up: 1,001-1,074 bytes of PSS each
// with malloc'ed slabs, 872-927 with mapped ones; 14.2-16.4 MiB once they had closed,
// against 13.1-13.2. The kernel merges neighbouring mappings (180 lines in /proc/PID/maps
// against 145 there), so vm.max_map_count (65,530 by default) is far even at one mapping
// per slab: a million connections would not reach it. A slab's mapping is whole pages.
constexpr std::size_t kPage = 4096;
constexpr std::size_t slab_mapping_bytes(std::size_t c) { return (slab_bytes(c) + kPage - 1) / kPage * kPage; }

char* map_slab(std::size_t c) {
  void* m = ::mmap(nullptr, slab_mapping_bytes(c), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  return static_cast<char*>(m);
}

void unmap_slab(char* slab, std::size_t c) noexcept { ::munmap(slab, slab_mapping_bytes(c)); }

// Carves a fresh slab into blocks of class c: returns one, pools the rest. Out of line:
// inlined, its vector bookkeeping cost task_alloc's fast path a stack frame (+5
// instructions per allocation, callgrind).
[[gnu::noinline, gnu::cold]] void* carve_slab(ThreadCache* tc, std::size_t c) {
  const std::size_t bb = block_bytes(c);
  const std::size_t n = slab_blocks(c);
  std::vector<char*>& slabs = tc->slabs[c];
  // Room first (doubling): a throw then leaks nothing.
  if (slabs.size() == slabs.capacity()) slabs.reserve(std::max<std::size_t>(16, 2 * slabs.capacity()));
  char* slab = map_slab(c);
  slabs.push_back(slab);
  for (std::size_t i = 0; i < n; ++i) {
    auto* h = reinterpret_cast<BlockHeader*>(slab + i * bb);
    h->owner = tc;
    h->cls = c;
    if (i == 0) continue;
    FreeBlock* b = as_free(h);
    b->next = tc->local[c];
    tc->local[c] = b;
  }
  return reinterpret_cast<BlockHeader*>(slab) + 1;
}

// Releases the slabs of class c whose blocks are all free (see the trim invariant in
// alloc.h); returns their bytes. Every free block of the class is first gathered on the
// local list, so an exception (the count vectors) leaves the cache consistent.
std::size_t trim_class(ThreadCache* tc, std::size_t c) {
  std::vector<char*>& slabs = tc->slabs[c];
  if (slabs.empty()) return 0;
  if (FreeBlock* remote = tc->remote[c].exchange(nullptr, std::memory_order_acquire)) {
    FreeBlock* tail = remote;
    while (tail->next != nullptr) tail = tail->next;
    tail->next = tc->local[c];
    tc->local[c] = remote;
  }
  if (tc->local[c] == nullptr) return 0;
  const std::size_t n = slab_blocks(c);
  std::sort(slabs.begin(), slabs.end());
  std::vector<uint32_t> free_blocks(slabs.size(), 0);
  // The slab of each free block, in list order (the last slab starting at or before the
  // block's header): looked up once, used to count and then to unlink.
  std::vector<uint32_t> slab_of;
  for (FreeBlock* b = tc->local[c]; b != nullptr; b = b->next) {
    const char* h = reinterpret_cast<const char*>(b) - sizeof(BlockHeader);
    slab_of.push_back(static_cast<uint32_t>(std::upper_bound(slabs.begin(), slabs.end(), h) - slabs.begin() - 1));
    ++free_blocks[slab_of.back()];
  }
  if (std::find(free_blocks.begin(), free_blocks.end(), n) == free_blocks.end()) return 0;
  // Unlink the blocks of wholly free slabs, keeping the others in their order.
  std::size_t i = 0;
  for (FreeBlock** link = &tc->local[c]; *link != nullptr; ++i) {
    if (free_blocks[slab_of[i]] == n) *link = (*link)->next;
    else link = &(*link)->next;
  }
  std::size_t released = 0, kept = 0;
  for (std::size_t s = 0; s < slabs.size(); ++s) {
    if (free_blocks[s] == n) {
      unmap_slab(slabs[s], c);
      released += slab_mapping_bytes(c);
    } else {
      slabs[kept++] = slabs[s];
    }
  }
  slabs.resize(kept);
  return released;
}

}  // namespace

std::size_t task_cache_trim() noexcept {
  ThreadCache* tc = tl_cache;
  if (tc == nullptr) return 0;
  std::size_t released = 0;
  try {
    for (std::size_t c = 0; c < kAllocClasses; ++c) released += trim_class(tc, c);
  } catch (const std::bad_alloc&) {
    // Out of memory for the count: what was released so far stays released.
  }
  return released;
}

std::size_t task_cache_slab_bytes() noexcept {
  ThreadCache* tc = tl_cache;
  if (tc == nullptr) return 0;
  std::size_t total = 0;
  for (std::size_t c = 0; c < kAllocClasses; ++c) total += tc->slabs[c].size() * slab_mapping_bytes(c);
  return total;
}

void* task_alloc(std::size_t bytes) {
  std::size_t c = class_of(bytes);
  if (c >= kAllocClasses || !kPooled) return unpooled(bytes, c);
  ThreadCache* tc = my_cache();
  FreeBlock* b = tc->local[c];
  if (b == nullptr) {
    // Take back, all at once, what other threads freed.
    b = tc->remote[c].exchange(nullptr, std::memory_order_acquire);
    if (b == nullptr) return carve_slab(tc, c);
  }
  tc->local[c] = b->next;
  // The next allocation reads that block's link; blocks freed by other workers are
  // usually cold here, so start the miss now.
  __builtin_prefetch(b->next, 1);
  return b;  // the user area starts where the link was
}

void task_free(void* p, std::size_t /*bytes*/) noexcept {
  if (p == nullptr) return;
  BlockHeader* h = as_header(p);
  ThreadCache* owner = h->owner;
  if (owner == nullptr) {
    std::free(h);
    return;
  }
  auto c = static_cast<std::size_t>(h->cls);
  FreeBlock* b = as_free(h);
  if (owner == tl_cache) {
    b->next = owner->local[c];
    owner->local[c] = b;
    return;
  }
  FreeBlock* head = owner->remote[c].load(std::memory_order_relaxed);
  do {
    b->next = head;
    // Release publishes b->next to the owner's acquire exchange.
  } while (!owner->remote[c].compare_exchange_weak(head, b, std::memory_order_release,
                                                   std::memory_order_relaxed));
}

void enable_task_cache() {
  if (kPooled) my_cache();
}

void disable_task_cache() noexcept {
  ThreadCache* tc = tl_cache;
  if (tc == nullptr) return;
  tl_cache = nullptr;
  tl_retirer.armed = false;
  std::lock_guard lk(g_retired_mu);
  if (g_retired == nullptr) g_retired = new std::vector<ThreadCache*>();
  g_retired->push_back(tc);
}

}  // namespace sg::exec
