// Memory an idle worker gives back.
//
// Why: the gateway's hot paths keep what they free for the next request (the task
// allocator's slabs, read buffers, parsers, head and TLS record buffers), which is what
// makes them cheap. After a spike, that memory would otherwise stay resident for the life
// of the process: 10,000 connections held and closed left 11.6 MB more than before them,
// for good. A worker that has had nothing to do for RuntimeConfig::idle_memory_reclaim
// gives it back instead, in two steps:
//   1. on its own thread (the caches are per thread): the registered reclaimers empty
//      their caches and the wholly free slabs of the task allocator are unmapped (a
//      munmap each: about 1 ms for the 10k connections' slabs, alloc.cpp).
//   2. on the blocking pool: malloc returns its free pages to the system (malloc_trim).
//      That walks every free chunk of every arena: 3 ms for a fragmented 20 MB heap, 16 ms
//      for 100 MB, 61 ms for 400 MB (measured here), which a worker must not spend with
//      its queue and its ring waiting.
// A worker that is busy, or idle for less, keeps everything.
#pragma once

#include <cstddef>

namespace sg::exec {

// Empties the calling thread's cache of something; returns the bytes it freed.
using IdleReclaimer = std::size_t (*)() noexcept;

// Registers `fn`, run on each worker thread that reclaims (at static initialisation, or
// at least before the runtime starts).
void add_idle_reclaimer(IdleReclaimer fn);

// Step 1, on the calling thread: runs every registered reclaimer, then gives this
// thread's wholly free task-allocator slabs back (task_cache_trim). Returns the bytes
// they freed.
std::size_t reclaim_thread_memory() noexcept;

// Step 2: returns malloc's free pages to the system. Slow (see above): run it off the
// workers. A call while another one runs returns at once, and that walk runs once more.
void release_free_pages() noexcept;

// glibc serves a request of at least this size with its own mmap, given back at free.
inline constexpr std::size_t kMallocMmapThreshold = 128 * 1024;

// Fixes glibc's mmap threshold at kMallocMmapThreshold (its initial value) for the life
// of the process. Why: glibc raises the threshold to the size of each large mmapped block
// freed (a /metrics scrape that copied 2,000 live task records freed 288 KiB), after which
// transient buffers up to that size are carved from a worker's arena instead. Freed, they
// join the top of that arena, and malloc_trim returns the top of the main arena only: ~480
// KiB stayed resident per worker arena for good (an RSS test kept 33-55% of a spike of
// connections; -4 to 9% with the threshold fixed). Nothing on the request path asks for
// 128 KiB or more (read buffers are 4 KiB and 64 KiB). Returns false where the operator set
// the threshold (malloc_threshold_set_by_environment), the C library is not glibc, or its
// malloc was replaced (AddressSanitizer's mallopt sets nothing).
bool fix_malloc_mmap_threshold() noexcept;

// True when the environment sets glibc's mmap threshold: MALLOC_MMAP_THRESHOLD_, or a
// GLIBC_TUNABLES naming glibc.malloc.mmap_threshold.
bool malloc_threshold_set_by_environment() noexcept;

}  // namespace sg::exec
