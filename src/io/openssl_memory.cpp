#include "io/openssl_memory.h"

#include <malloc.h>
#include <openssl/crypto.h>

#include <cstdint>
#include <cstdlib>

#include "exec/reclaim.h"
#include "common/thread_cache.h"

namespace sg::io {

namespace {

// OpenSSL 3's record buffers: 16,712 bytes to read, 16,584 to write (a 16 KiB record plus
// its header, MAC or tag and padding room). Anything in this range is served as one block
// size, so that every cached buffer fits every request.
constexpr std::size_t kSmallest = 16 * 1024 + 1;
constexpr std::size_t kBlock = 17 * 1024;
// Blocks start on a page, so that a free tells most other blocks apart by their address
// alone (a heap chunk is page-aligned once in 256): asking malloc for the size of every
// block OpenSSL frees cost 0.6% of a full handshake's instructions. A page-aligned block
// whose usable size lies in [kBlock, kBlock + kSlack) is recycled, whoever asked for it,
// since it fits every request in the range (glibc reports a little more than was asked).
constexpr std::size_t kAlign = 4096;
constexpr std::size_t kSlack = 64;

void release_block(void* p) noexcept { std::free(p); }
using RecordBuffers = PerThreadCache<struct RecordBuffersTag, kRecordBufferCacheSize, release_block>;

bool recyclable(void* p) {
  if ((reinterpret_cast<std::uintptr_t>(p) & (kAlign - 1)) != 0) return false;
  const std::size_t usable = malloc_usable_size(p);
  return usable >= kBlock && usable < kBlock + kSlack;
}

void* new_block() {
  void* p = nullptr;
  return posix_memalign(&p, kAlign, kBlock) == 0 ? p : nullptr;
}

void* hook_malloc(std::size_t n, const char* /*file*/, int /*line*/) { return openssl_memory_alloc(n); }

void* hook_realloc(void* p, std::size_t n, const char* /*file*/, int /*line*/) {
  if (p == nullptr) return openssl_memory_alloc(n);
  return std::realloc(p, n);  // a recycled block is a malloc'ed one: realloc takes it as is
}

void hook_free(void* p, const char* /*file*/, int /*line*/) { openssl_memory_free(p); }

const bool kRecordBuffersReclaimable = (exec::add_idle_reclaimer(&release_cached_record_buffers), true);

}  // namespace

bool install_openssl_memory_hooks() {
  (void)kRecordBuffersReclaimable;
  return CRYPTO_set_mem_functions(hook_malloc, hook_realloc, hook_free) == 1;
}

void* openssl_memory_alloc(std::size_t n) {
  if (n < kSmallest || n > kBlock) return std::malloc(n);
  if (void* p = RecordBuffers::take()) return p;
  return new_block();
}

void openssl_memory_free(void* p) {
  if (p == nullptr) return;
  if (!recyclable(p) || !RecordBuffers::keep(p)) std::free(p);
}

std::size_t cached_record_buffers() { return RecordBuffers::size(); }

std::size_t release_cached_record_buffers() noexcept { return RecordBuffers::clear() * kBlock; }

}  // namespace sg::io
