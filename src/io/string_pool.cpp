#include "io/string_pool.h"

#include "common/depot.h"
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

// The threads' shared overflow (common/depot.h): a connection's task moves between
// workers, so one worker's pool runs empty while the other's overflows. A full pool moves
// half of itself there (if there is room), an empty one takes up to half a pool back.
constexpr std::size_t kBatch = kPooledStringsPerThread / 2;
// Never destroyed: a thread may give a buffer back during exit.
Depot<std::string, kPooledStringsPerThread>& g_depot = *new Depot<std::string, kPooledStringsPerThread>;

bool spill_to_depot() {
  if (kBatch == 0 || !g_depot.put(tl_pool.slots + tl_pool.n - kBatch, kBatch)) return false;
  tl_pool.n -= kBatch;  // those slots are left moved from: empty, no buffer
  return true;
}

bool refill_from_depot() {
  if (kBatch == 0) return false;
  tl_pool.n = g_depot.take(tl_pool.slots, kBatch);
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
  g_depot.drain([&bytes](std::string& d) {
    bytes += d.capacity();
    std::string().swap(d);
  });
  if (tl_closed) return bytes;
  for (std::size_t i = 0; i < tl_pool.n; ++i) {
    bytes += tl_pool.slots[i].capacity();
    std::string().swap(tl_pool.slots[i]);
  }
  tl_pool.n = 0;
  return bytes;
}

}  // namespace sg::io
