// Size-class cache for task and coroutine-frame memory.
//
// Why: every spawn allocates a task and every coroutine a frame, and a task stolen by
// another worker is freed there. With plain malloc that is a cross-thread free on every
// stolen task (glibc arena locking); Tokio's lesson (DESIGN.md) is that allocation matters
// as much as the queue.
//
// Scheme (mimalloc-style "delayed free"): each worker thread owns a cache; every block
// carries a 16-byte header naming the cache that allocated it (its owner, fixed for the
// block's lifetime). Freed by its owner, a block goes onto the owner's local free list
// (plain pointers). Freed by any other thread, it is pushed onto the owner's per-class
// remote stack with one CAS; the owner takes the whole stack with one exchange when its
// local list runs dry. A thread gets its cache on its first allocation; when it exits,
// the cache is retired and later adopted by a new thread.
//
// Invariants of a remote stack (`ThreadCache::remote[c]`):
//   * many threads push (CAS loop, release); only the owner pops, and only all at once
//     (exchange, acquire), so there is no ABA: nobody pops single nodes concurrently.
//   * when the owner thread exits it swaps in kClosed; later pushers see it and free the
//     block to malloc. The cache struct itself is never freed (retired), so a pusher can
//     always read the stack head.
#pragma once

#include <cstddef>

namespace sg::exec {

inline constexpr std::size_t kAllocClassBytes = 64;
inline constexpr std::size_t kAllocClasses = 16;       // up to 1 KiB; larger goes to malloc
inline constexpr std::size_t kAllocCacheDepth = 1024;  // blocks kept on a local list per class

void* task_alloc(std::size_t bytes);
void task_free(void* p, std::size_t bytes) noexcept;

// Creates the calling thread's cache now / retires it before the thread exits (both
// happen automatically otherwise).
void enable_task_cache();
void disable_task_cache() noexcept;

}  // namespace sg::exec
