#include "io/string_pool.h"

#include <atomic>
#include <mutex>
#include <vector>

#include "exec/reclaim.h"

namespace sg::io {

namespace {

const std::size_t kInlineCapacity = std::string().capacity();  // no heap buffer up to this

// Set as the pool is destroyed at the thread's exit: a buffer given back after that (a
// connection destroyed by a later thread-local destructor) is freed. Trivially
// destructible, so it stays readable until the thread is gone.
thread_local bool tl_closed = false;

struct Pool {
  std::string slots[kPooledStringsPerThread > 0 ? kPooledStringsPerThread : 1];
  std::size_t n = 0;
  ~Pool() { tl_closed = true; }  // before the slots free their buffers
};
thread_local Pool tl_pool;

// Shared by the threads, as common/thread_cache.h's depot and for the same reason: a
// connection's task moves between workers, so one worker's pool runs empty while the
// other's overflows. A full pool moves half of itself here (if there is room for it), an
// empty one takes up to half a pool back: one lock per kBatch buffers.
constexpr std::size_t kBatch = kPooledStringsPerThread / 2;
struct Depot {
  std::mutex mu;
  std::vector<std::string> strings;  // under mu; at most kPooledStringsPerThread
  std::atomic<std::size_t> size_hint{0};  // strings.size(), read without mu (a hint)
};
Depot& g_depot = *new Depot;  // never destroyed: a thread may give a buffer back during exit

bool spill_to_depot() {
  if (kBatch == 0) return false;
  std::lock_guard lk(g_depot.mu);
  if (g_depot.strings.size() + kBatch > kPooledStringsPerThread) return false;
  for (std::size_t i = 0; i < kBatch; ++i) g_depot.strings.push_back(std::move(tl_pool.slots[--tl_pool.n]));
  g_depot.size_hint.store(g_depot.strings.size(), std::memory_order_relaxed);
  return true;
}

bool refill_from_depot() {
  if (kBatch == 0 || g_depot.size_hint.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard lk(g_depot.mu);
  while (tl_pool.n < kBatch && !g_depot.strings.empty()) {
    tl_pool.slots[tl_pool.n++] = std::move(g_depot.strings.back());
    g_depot.strings.pop_back();
  }
  g_depot.size_hint.store(g_depot.strings.size(), std::memory_order_relaxed);
  return tl_pool.n > 0;
}

const bool kPoolReclaimable = (exec::add_idle_reclaimer(&release_pooled_buffers), true);

}  // namespace

void adopt_pooled_buffer(std::string& s) {
  (void)kPoolReclaimable;
  if (s.capacity() > kInlineCapacity) return;
  if (!tl_closed && (tl_pool.n > 0 || refill_from_depot())) {
    s.swap(tl_pool.slots[--tl_pool.n]);
    return;
  }
  s.reserve(kPooledStringCapacity);
}

void recycle_buffer(std::string& s) noexcept {
  if (s.capacity() <= kInlineCapacity) {
    s.clear();
    return;
  }
  if (tl_closed || s.capacity() > kPooledStringMaxCapacity ||
      (tl_pool.n >= kPooledStringsPerThread && !spill_to_depot())) {
    std::string().swap(s);
    return;
  }
  s.clear();
  tl_pool.slots[tl_pool.n++].swap(s);  // the slot was empty, so `s` is left without a buffer
}

std::size_t pooled_buffers() { return tl_closed ? 0 : tl_pool.n; }

std::size_t release_pooled_buffers() noexcept {
  std::size_t bytes = 0;
  {
    std::lock_guard lk(g_depot.mu);
    for (const std::string& d : g_depot.strings) bytes += d.capacity();
    std::vector<std::string>().swap(g_depot.strings);
    g_depot.size_hint.store(0, std::memory_order_relaxed);
  }
  if (tl_closed) return bytes;
  for (std::size_t i = 0; i < tl_pool.n; ++i) {
    bytes += tl_pool.slots[i].capacity();
    std::string().swap(tl_pool.slots[i]);
  }
  tl_pool.n = 0;
  return bytes;
}

}  // namespace sg::io
