#include "exec/alloc.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <ranges>
#include <vector>

namespace sg::exec {

namespace {

struct ThreadCache;

// Every slab is one mapping of kSlabBytes aligned to kSlabBytes, so the slab of a pooled
// block is its address rounded down, and its header names the block's owner and class:
// blocks carry no header of their own (with a 16-byte one each, an idle connection's three
// blocks took 48 bytes more).
constexpr std::size_t kSlabBytes = kAllocSlabBytes;
static_assert((kSlabBytes & (kSlabBytes - 1)) == 0);
constexpr std::size_t kPage = 4096;

struct alignas(64) SlabHeader {
  ThreadCache* owner;  // fixed for the slab's lifetime
  uint32_t cls;
  // Blocks carved so far: written by the owner only (blocks are carved a page's worth at
  // a time, as they are first needed, so a slab's pages become resident only as used).
  uint32_t carved;
};
static_assert(sizeof(SlabHeader) == 64);

// A slab's first kHeaderArea bytes hold its header, at one of kHeaderColours offsets that
// the slab's address picks (cache colouring), and its blocks follow (64-byte aligned). At
// one offset every slab's header fell into the same L1 cache set, and each free reads
// one: 153-163 L1 data read misses per proxied GET against 150-151 with per-block
// headers; with eight offsets 144-157 (cachegrind, request_icount.sh, 3 runs each).
constexpr std::size_t kHeaderColours = 8;
constexpr std::size_t kHeaderArea = kHeaderColours * sizeof(SlabHeader);

char* slab_base(const void* p) {
  return reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(p) & ~(kSlabBytes - 1));
}
SlabHeader* header_of(char* base) {
  const std::size_t colour = (reinterpret_cast<uintptr_t>(base) / kSlabBytes) % kHeaderColours;
  return reinterpret_cast<SlabHeader*>(base + colour * sizeof(SlabHeader));
}
SlabHeader* slab_of(const void* block) { return header_of(slab_base(block)); }

struct FreeBlock {
  FreeBlock* next;
};

struct alignas(64) ThreadCache {
  FreeBlock* local[kAllocClasses] = {};
  // The slab each class is carving its blocks from (nullptr: none with room), owner only.
  SlabHeader* carving[kAllocClasses] = {};
  // The slabs mapped for each class, for trim (owner only).
  std::vector<SlabHeader*> slabs[kAllocClasses];
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
  return c < kAllocSmallClasses ? (c + 1) * kAllocClassBytes
                                : kSmallMax + (c - kAllocSmallClasses + 1) * kAllocLargeStep;
}
constexpr uint32_t slab_capacity(std::size_t c) {
  return static_cast<uint32_t>((kSlabBytes - kHeaderArea) / class_bytes(c));
}
static_assert(class_of(1) == 0 && class_of(64) == 0 && class_of(65) == 1 && class_of(1024) == 15);
static_assert(class_of(1025) == 16 && class_bytes(16) == 1280 && class_of(1280) == 16 && class_of(1281) == 17);
static_assert(class_of(kAllocMaxPooled) == kAllocClasses - 1 && class_bytes(kAllocClasses - 1) == kAllocMaxPooled);
static_assert(class_of(kAllocMaxPooled + 1) == kAllocClasses);
static_assert(slab_capacity(kAllocClasses - 1) >= 7 && slab_capacity(0) == 1016);

// The pages of a slab its carved blocks have touched (what it holds resident).
std::size_t touched_bytes(const SlabHeader* s) {
  return (kHeaderArea + s->carved * class_bytes(s->cls) + kPage - 1) / kPage * kPage;
}

// touched_bytes() summed over every slab of every thread (task_memory_bytes): raised as
// blocks are carved, lowered as trim unmaps slabs. Relaxed: a figure for /metrics, which
// orders nothing; each change is one atomic add, made per page carved, not per block.
std::atomic<std::size_t> g_touched_bytes{0};

// Slabs are mappings of their own, not malloc chunks. Malloc'ed, the long-lived slabs of
// a worker's connections sat between the chunks of its requests' short-lived allocations
// (header vectors, strings) in the same malloc arena, so the pages around them stayed
// resident after those were freed: malloc_trim can give back only whole free pages. 10k
// idle connections held after 200 at a time were set up: 1,001-1,074 bytes of PSS each
// with malloc'ed slabs, 872-927 with mapped ones; 14.2-16.4 MiB once they had closed,
// against 13.1-13.2. The kernel merges neighbouring mappings, so vm.max_map_count (65,530
// by default) is far even at one mapping per slab: a million connections would not reach
// it. The kernel places new mappings next to the last one, so after the first aligned
// slab the next ones are usually aligned as mapped; otherwise twice the size is mapped
// and the unaligned ends unmapped.
SlabHeader* map_slab(ThreadCache* tc, std::size_t c) {
  constexpr int kProt = PROT_READ | PROT_WRITE, kFlags = MAP_PRIVATE | MAP_ANONYMOUS;
  void* m = ::mmap(nullptr, kSlabBytes, kProt, kFlags, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  auto at = reinterpret_cast<uintptr_t>(m);
  if ((at & (kSlabBytes - 1)) != 0) {
    ::munmap(m, kSlabBytes);
    m = ::mmap(nullptr, 2 * kSlabBytes, kProt, kFlags, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    const auto start = reinterpret_cast<uintptr_t>(m);
    at = (start + kSlabBytes - 1) & ~(kSlabBytes - 1);
    if (at > start) ::munmap(m, at - start);
    if (const uintptr_t tail = start + 2 * kSlabBytes - (at + kSlabBytes); tail > 0) {
      ::munmap(reinterpret_cast<void*>(at + kSlabBytes), tail);
    }
  }
  SlabHeader* s = header_of(reinterpret_cast<char*>(at));
  s->owner = tc;
  s->cls = static_cast<uint32_t>(c);
  s->carved = 0;
  return s;
}

// Carves the next blocks of class c, from a fresh slab when the current one is full: a
// page's worth at a time (at least one), so that a slab's pages become resident only as
// they are needed while a burst of allocations does not pay a call per block (one block
// per call cost spawn_many_local 8% more instructions per task than carving whole slabs).
// Returns one block and pools the rest. Out of line: inlined, its bookkeeping cost
// task_alloc's fast path a stack frame (+5 instructions per allocation, callgrind).
[[gnu::noinline]] void* carve_blocks(ThreadCache* tc, std::size_t c) {
  SlabHeader* s = tc->carving[c];
  std::size_t touched_before = s != nullptr ? touched_bytes(s) : 0;
  if (s == nullptr || s->carved == slab_capacity(c)) {
    std::vector<SlabHeader*>& slabs = tc->slabs[c];
    // Room first (doubling): a throw then leaks nothing.
    if (slabs.size() == slabs.capacity()) slabs.reserve(std::max<std::size_t>(16, 2 * slabs.capacity()));
    s = map_slab(tc, c);
    slabs.push_back(s);
    tc->carving[c] = s;
    touched_before = 0;
  }
  const std::size_t bytes = class_bytes(c);
  const uint32_t n = std::min<uint32_t>(slab_capacity(c) - s->carved, std::max<uint32_t>(1, kPage / bytes));
  char* first = slab_base(s) + kHeaderArea + s->carved * bytes;
  s->carved += n;
  g_touched_bytes.fetch_add(touched_bytes(s) - touched_before, std::memory_order_relaxed);
  for (uint32_t i = n - 1; i > 0; --i) {
    auto* b = reinterpret_cast<FreeBlock*>(first + i * bytes);
    b->next = tc->local[c];
    tc->local[c] = b;
  }
  return first;
}

// Releases the slabs of class c whose carved blocks are all free (see the trim invariant
// in alloc.h); returns the bytes they held resident. Every free block of the class is
// first gathered on the local list, so an exception (the count vectors) leaves the cache
// consistent.
std::size_t trim_class(ThreadCache* tc, std::size_t c) {
  std::vector<SlabHeader*>& slabs = tc->slabs[c];
  if (slabs.empty()) return 0;
  if (FreeBlock* remote = tc->remote[c].exchange(nullptr, std::memory_order_acquire)) {
    FreeBlock* tail = remote;
    while (tail->next != nullptr) tail = tail->next;
    tail->next = tc->local[c];
    tc->local[c] = remote;
  }
  if (tc->local[c] == nullptr) return 0;
  std::sort(slabs.begin(), slabs.end());
  std::vector<uint32_t> free_blocks(slabs.size(), 0);
  // The slab of each free block, in list order: looked up once, used to count and then
  // to unlink.
  std::vector<uint32_t> index_of;
  for (FreeBlock* b = tc->local[c]; b != nullptr; b = b->next) {
    index_of.push_back(static_cast<uint32_t>(std::lower_bound(slabs.begin(), slabs.end(), slab_of(b)) - slabs.begin()));
    ++free_blocks[index_of.back()];
  }
  auto wholly_free = [&](std::size_t i) { return free_blocks[i] == slabs[i]->carved; };
  if (std::ranges::none_of(std::views::iota(std::size_t{0}, slabs.size()), wholly_free)) return 0;
  // Unlink the blocks of wholly free slabs, keeping the others in their order.
  std::size_t i = 0;
  for (FreeBlock** link = &tc->local[c]; *link != nullptr; ++i) {
    if (wholly_free(index_of[i])) *link = (*link)->next;
    else link = &(*link)->next;
  }
  std::size_t released = 0, kept = 0;
  for (std::size_t s = 0; s < slabs.size(); ++s) {
    if (wholly_free(s)) {
      released += touched_bytes(slabs[s]);
      if (tc->carving[c] == slabs[s]) tc->carving[c] = nullptr;
      ::munmap(slab_base(slabs[s]), kSlabBytes);
    } else {
      slabs[kept++] = slabs[s];
    }
  }
  slabs.resize(kept);
  g_touched_bytes.fetch_sub(released, std::memory_order_relaxed);
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
  for (const auto& slabs : tc->slabs) {
    for (const SlabHeader* s : slabs) total += touched_bytes(s);
  }
  return total;
}

std::size_t task_memory_bytes() noexcept { return g_touched_bytes.load(std::memory_order_relaxed); }

// Whether a block of `bytes` lives in a slab (or is malloc'ed): both ends decide alike.
constexpr bool pooled(std::size_t bytes) { return kTaskAllocPooled && bytes <= kAllocMaxPooled; }

void* task_alloc(std::size_t bytes) {
  if (!pooled(bytes)) {
    void* p = std::malloc(bytes == 0 ? 1 : bytes);  // (malloc(0) may return null)
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  const std::size_t c = class_of(bytes);
  ThreadCache* tc = my_cache();
  FreeBlock* b = tc->local[c];
  if (b == nullptr) {
    // Take back, all at once, what other threads freed.
    b = tc->remote[c].exchange(nullptr, std::memory_order_acquire);
    if (b == nullptr) return carve_blocks(tc, c);
  }
  tc->local[c] = b->next;
  // The next allocation reads that block's link; blocks freed by other workers are
  // usually cold here, so start the miss now.
  __builtin_prefetch(b->next, 1);
  return b;  // the block's first word was the link
}

// `bytes` must be what the block was allocated with: it tells a pooled block (in a slab,
// whose header names owner and class) from a malloc'ed one.
void task_free(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  if (!pooled(bytes)) {
    std::free(p);
    return;
  }
  const SlabHeader* slab = slab_of(p);
  ThreadCache* owner = slab->owner;
  const std::size_t c = slab->cls;
  assert(c == class_of(bytes) && "task_free: not the size the block was allocated with");
  auto* b = static_cast<FreeBlock*>(p);
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
  if (kTaskAllocPooled) my_cache();
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
