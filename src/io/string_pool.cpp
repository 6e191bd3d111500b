#include "io/string_pool.h"

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

const bool kPoolReclaimable = (exec::add_idle_reclaimer(&release_pooled_buffers), true);

}  // namespace

void adopt_pooled_buffer(std::string& s) {
  (void)kPoolReclaimable;
  if (s.capacity() > kInlineCapacity) return;
  if (!tl_closed && tl_pool.n > 0) {
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
  if (tl_closed || tl_pool.n >= kPooledStringsPerThread || s.capacity() > kPooledStringMaxCapacity) {
    std::string().swap(s);
    return;
  }
  s.clear();
  tl_pool.slots[tl_pool.n++].swap(s);  // the slot was empty, so `s` is left without a buffer
}

std::size_t pooled_buffers() { return tl_closed ? 0 : tl_pool.n; }

std::size_t release_pooled_buffers() noexcept {
  if (tl_closed) return 0;
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < tl_pool.n; ++i) {
    bytes += tl_pool.slots[i].capacity();
    std::string().swap(tl_pool.slots[i]);
  }
  tl_pool.n = 0;
  return bytes;
}

}  // namespace sg::io
