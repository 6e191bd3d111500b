// Size-class cache for task and coroutine-frame memory.
//
// Why: every spawn allocates a task and every coroutine a frame, and a task stolen by
// another worker is freed there. With plain malloc that is a cross-thread free on every
// stolen task (glibc arena locking); Tokio's lesson (DESIGN.md) is that allocation matters
// as much as the queue.
//
// Scheme (mimalloc-style "delayed free"): each thread that allocates owns a cache. Blocks
// are carved a page's worth at a time, as first needed, from 64 KiB slabs: each slab is
// an anonymous mapping of its own (alloc.cpp says why not malloc), aligned to its size,
// whose header names its owner cache and size class, so a block carries no header (its
// slab is its address rounded down). Freed by its owner, a block goes onto the owner's
// local free list (plain pointers); freed by any other thread, it is pushed onto the
// owner's per-class remote stack with one CAS, and the owner takes the whole stack with
// one exchange when its local list runs dry. Memory held is thus bounded by the peak
// number of live tasks/frames per thread; task_cache_trim() (a worker that has been idle
// a while) unmaps the slabs whose blocks are all free, so a spike's frames do not stay
// resident for the life of the process. A thread's cache, with its blocks, is retired
// when the thread exits and adopted by the next new thread.
// Allocations above 8 KiB, and all allocations under AddressSanitizer (so use-after-free
// stays detectable), go to malloc.
//
// Invariants of a remote stack (`ThreadCache::remote[c]`):
//   * many threads push (CAS loop, release); only the owner pops, and only all at once
//     (exchange, acquire), so there is no ABA: nobody pops single nodes concurrently.
//   * a retired cache keeps its stacks open; the adopting thread becomes the owner.
//   * trim (owner only) takes the remote stack with the same exchange and releases a slab
//     only when every block carved from it was in what it took or in the local list: a
//     block still live, or pushed after the exchange, keeps its slab. So no thread can
//     push a block of a released slab (it would have to be live), and the owner's lists
//     never name one.
#pragma once

#include <cstddef>

namespace sg::exec {

// Size classes: 64-byte steps up to 1 KiB (tasks, small frames), then 256-byte steps up
// to 8 KiB (the frames of the proxy's larger coroutines); larger goes to malloc.
inline constexpr std::size_t kAllocClassBytes = 64;
inline constexpr std::size_t kAllocSmallClasses = 16;  // 64 B .. 1 KiB
inline constexpr std::size_t kAllocLargeStep = 256;
inline constexpr std::size_t kAllocMaxPooled = 8 * 1024;
inline constexpr std::size_t kAllocClasses =
    kAllocSmallClasses + (kAllocMaxPooled - kAllocSmallClasses * kAllocClassBytes) / kAllocLargeStep;
// Under AddressSanitizer every block is its own malloc, so that use-after-free and double
// free of task memory are caught instead of hidden inside the pool.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kTaskAllocPooled = false;
#else
inline constexpr bool kTaskAllocPooled = true;
#endif
inline constexpr std::size_t kAllocSlabBytes = 64 * 1024;  // one aligned mapping per slab of blocks

void* task_alloc(std::size_t bytes);
// Unmaps the calling thread's completely free slabs; returns the bytes their carved blocks
// held (whole pages).
// Only the cache's owner thread may call it (the one that allocates from it).
std::size_t task_cache_trim() noexcept;
// Bytes the calling thread's slabs have carved into blocks, free or not (whole pages).
std::size_t task_cache_slab_bytes() noexcept;
// Bytes the slabs of every thread hold resident (pages carved into blocks, in use or free
// for reuse); task_cache_trim lowers it. 0 where blocks are malloc'ed (AddressSanitizer).
std::size_t task_memory_bytes() noexcept;
// `bytes` is the size given to task_alloc (sized delete passes it).
void task_free(void* p, std::size_t bytes) noexcept;

// Creates the calling thread's cache now / retires it before the thread exits (both
// happen automatically otherwise).
void enable_task_cache();
void disable_task_cache() noexcept;

}  // namespace sg::exec
