#include "exec/reclaim.h"

#include <malloc.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "exec/alloc.h"

namespace sg::exec {

namespace {
struct Registry {
  std::mutex mu;
  std::vector<IdleReclaimer> fns;
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: registrations run at static init
  return *r;
}
}  // namespace

void add_idle_reclaimer(IdleReclaimer fn) {
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  r.fns.push_back(fn);
}

std::size_t reclaim_thread_memory() noexcept {
  std::size_t freed = 0;
  {
    Registry& r = registry();
    std::lock_guard lk(r.mu);
    for (IdleReclaimer fn : r.fns) freed += fn();
  }
  return freed + task_cache_trim();
}

void release_free_pages() noexcept {
  // Two workers going quiet together queue two of these: one walk is enough.
  static std::atomic<bool> running{false};
  if (running.exchange(true, std::memory_order_acquire)) return;
#if defined(__GLIBC__)
  // Freed chunks in the middle of the heap stay resident until trimmed: free() gives
  // back only the top of the heap.
  malloc_trim(0);
#endif
  running.store(false, std::memory_order_release);
}

}  // namespace sg::exec
