#include "io/openssl_memory.h"

#include <malloc.h>
#include <openssl/crypto.h>

#include <cstdlib>

#include "exec/reclaim.h"

namespace sg::io {

namespace {

// OpenSSL 3's record buffers: 16,712 bytes to read, 16,584 to write (a 16 KiB record plus
// its header, MAC or tag and padding room). Anything in this range is served as one block
// size, so that every cached buffer fits every request.
constexpr std::size_t kSmallest = 16 * 1024 + 1;
constexpr std::size_t kBlock = 17 * 1024;
// A block malloc'ed for kBlock bytes reports a little more usable space (glibc rounds the
// chunk to 16 bytes); a freed block whose usable size lies in [kBlock, kBlock + kSlack) is
// recycled, whoever asked for it, since it fits every request in the range.
constexpr std::size_t kSlack = 64;

// The calling thread's free blocks. Trivially destructible, so that a free during the
// thread's exit, after the cleaner below has run, still finds it (closed) and frees.
struct RecordBufferCache {
  static constexpr std::size_t kMax = kRecordBufferCacheSize;
  void* free[kMax > 0 ? kMax : 1];
  std::size_t n = 0;
  bool closed = false;
};
thread_local RecordBufferCache tl_cache;

struct RecordBufferCacheCleaner {
  bool armed = false;
  ~RecordBufferCacheCleaner() {
    release_cached_record_buffers();
    tl_cache.closed = true;
  }
};
thread_local RecordBufferCacheCleaner tl_cleaner;

bool recyclable(void* p) {
  const std::size_t usable = malloc_usable_size(p);
  return usable >= kBlock && usable < kBlock + kSlack;
}

void* hook_malloc(std::size_t n, const char* /*file*/, int /*line*/) { return openssl_memory_alloc(n); }

void* hook_realloc(void* p, std::size_t n, const char* /*file*/, int /*line*/) {
  if (p == nullptr) return openssl_memory_alloc(n);
  return std::realloc(p, n);  // a recycled block is a malloc'ed one: realloc takes it as is
}

void hook_free(void* p, const char* /*file*/, int /*line*/) { openssl_memory_free(p); }

const bool kReclaimable = (exec::add_idle_reclaimer(&release_cached_record_buffers), true);

}  // namespace

bool install_openssl_memory_hooks() {
  (void)kReclaimable;
  return CRYPTO_set_mem_functions(hook_malloc, hook_realloc, hook_free) == 1;
}

void* openssl_memory_alloc(std::size_t n) {
  if (n < kSmallest || n > kBlock) return std::malloc(n);
  RecordBufferCache& c = tl_cache;
  if (c.n > 0) return c.free[--c.n];
  return std::malloc(kBlock);
}

void openssl_memory_free(void* p) {
  if (p == nullptr) return;
  RecordBufferCache& c = tl_cache;
  if (c.closed || c.n >= RecordBufferCache::kMax || !recyclable(p)) {
    std::free(p);
    return;
  }
  if (c.n == 0) tl_cleaner.armed = true;  // registers the cleaner for this thread
  c.free[c.n++] = p;
}

std::size_t cached_record_buffers() { return tl_cache.n; }

std::size_t release_cached_record_buffers() noexcept {
  RecordBufferCache& c = tl_cache;
  const std::size_t freed = c.n * kBlock;
  for (std::size_t i = 0; i < c.n; ++i) std::free(c.free[i]);
  c.n = 0;
  return freed;
}

}  // namespace sg::io
