#include "exec/reclaim.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "exec/alloc.h"
#include "exec/coalesced_run.h"

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

bool malloc_threshold_set_by_environment() noexcept {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
         (tunables != nullptr && std::strstr(tunables, "mmap_threshold") != nullptr);
}

bool fix_malloc_mmap_threshold() noexcept {
#if defined(__GLIBC__)
  if (malloc_threshold_set_by_environment()) return false;  // the operator's setting wins
  return mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMallocMmapThreshold)) == 1;
#else
  return false;
#endif
}

void release_free_pages() noexcept {
  // Two workers going quiet together ask twice: one walk after both is enough, but a walk
  // already past one worker's arena when that worker freed its caches is not.
  static CoalescedRun walks;
  walks.request([] {
#if defined(__GLIBC__)
    // Freed chunks in the middle of the heap stay resident until trimmed: free() gives
    // back only the top of the heap.
    malloc_trim(0);
#endif
  });
}

}  // namespace sg::exec
