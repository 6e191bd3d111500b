// String buffers kept per thread for the next request.
//
// Why: a request's head bytes (the upstream request head, the client response head) and a
// TLS connection's staging and ciphertext buffers are a few hundred bytes each, made and
// freed once per request. A connection's task moves between workers, so they are often
// freed on the other worker; glibc's per-thread cache keeps only 7 chunks of a size, and
// the rest lock the arena of the worker that allocated them. Under keep-alive HTTPS load
// (wrk -c64) those frees made most of the gateway's remaining futex calls: 59-68 per
// 1,000 requests after io/openssl_memory.h, 22-26 with this pool. A buffer given back here is
// kept by the thread that gives it back, and taken by the next request there, without
// malloc or free; a full pool passes half of itself to a depot shared by the threads,
// where an empty pool finds it (string_pool.cpp). A buffer over kPooledStringMaxCapacity,
// or one neither the pool nor the depot has room for, is freed. An idle worker's reclaim
// empties its pool and the depot.
#pragma once

#include <cstddef>
#include <string>

namespace sg::io {

// A new buffer's capacity: every head and TLS record of a small request fits.
inline constexpr std::size_t kPooledStringCapacity = 512;
// Bigger buffers are freed, not kept.
inline constexpr std::size_t kPooledStringMaxCapacity = 4096;
// How many a thread keeps (at most 256 KiB); none under ASan, so that a use after free
// stays detectable.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr std::size_t kPooledStringsPerThread = 0;
#else
inline constexpr std::size_t kPooledStringsPerThread = 64;
#endif

// Gives `s` a buffer from the calling thread's pool (or a new one of
// kPooledStringCapacity) unless it already has one on the heap; `s` must be empty.
void adopt_pooled_buffer(std::string& s);
// Empties `s` and gives its heap buffer, if any, to the calling thread's pool.
void recycle_buffer(std::string& s) noexcept;

// Buffers in the calling thread's pool now.
std::size_t pooled_buffers();
// Frees the calling thread's pooled buffers and the depot's; returns their bytes (an
// idle reclaimer).
std::size_t release_pooled_buffers() noexcept;

// A string whose buffer comes from the pool and goes back to it at destruction.
class PooledString {
 public:
  PooledString() { adopt_pooled_buffer(s_); }
  ~PooledString() { recycle_buffer(s_); }
  PooledString(const PooledString&) = delete;
  PooledString& operator=(const PooledString&) = delete;
  std::string& str() { return s_; }
  const std::string& str() const { return s_; }

 private:
  std::string s_;
};

}  // namespace sg::io
