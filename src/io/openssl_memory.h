// OpenSSL's allocations, with its record buffers recycled per thread.
//
// Why: our contexts set SSL_MODE_RELEASE_BUFFERS, so an idle TLS connection holds no
// record buffer (about 16.5 KiB each way). The price is that OpenSSL allocates and frees
// them around every record: a keep-alive HTTPS request cost three ~16.5 KiB mallocs (the
// read buffer twice: once for the request, once for the read that finds nothing more;
// the write buffer once). glibc serves that size from its locked bins, not from the
// per-thread tcache, and a connection's task moves between workers, so the frees lock
// the other worker's arena: 109-124 futex calls per 1,000 requests, and the malloc paths
// were 5-6% of the gateway's CPU (perf, wrk -c64 keep-alive HTTPS); 59-68 with this cache.
//
// The hooks below (CRYPTO_set_mem_functions) pass every allocation to malloc, except
// those of a record buffer's size, which come from and go back to a small cache of the
// calling thread (a buffer freed on another thread joins that thread's cache). Idle
// connections still hold none; an idle worker's reclaim empties its cache.
#pragma once

#include <cstddef>

namespace sg::io {

// Routes OpenSSL's allocations through the hooks. Must run before anything else calls
// OpenSSL (first thing in main); returns false when OpenSSL has already allocated, and
// OpenSSL then keeps using malloc directly.
bool install_openssl_memory_hooks();

// The hooks' allocation and free, exposed for tests: sizes in (16 KiB, 17 KiB] come from
// the calling thread's cache (or a new page-aligned 17 KiB block), and a freed block of
// that kind joins the cache (while it has room); everything else is plain malloc and free.
void* openssl_memory_alloc(std::size_t n);
void openssl_memory_free(void* p);

// How many free buffers a thread keeps (544 KiB), and the depot that threads share
// (common/thread_cache.h) as many again; none under ASan, so that a use after free stays
// detectable.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr std::size_t kRecordBufferCacheSize = 0;
#else
inline constexpr std::size_t kRecordBufferCacheSize = 32;
#endif

// Buffers in the calling thread's cache now.
std::size_t cached_record_buffers();

// Frees the calling thread's cached buffers and the depot's; returns their bytes (an idle
// reclaimer).
std::size_t release_cached_record_buffers() noexcept;

}  // namespace sg::io
