// Per-thread size-class cache for task and coroutine-frame memory.
//
// Why: every spawn allocates a task and every coroutine a frame. glibc's tcache keeps only
// 7 blocks per bin, so a worker that spawns thousands of tasks falls through to the slower
// arena paths; Tokio's lesson (DESIGN.md) is that allocation matters as much as the queue.
// Blocks are recycled through a bounded per-thread free list per 64-byte size class. A
// block freed on another thread (a stolen task) lands in that thread's cache; the bound
// keeps a consumer thread from hoarding what a producer keeps allocating.
#pragma once

#include <cstddef>

namespace sg::exec {

inline constexpr std::size_t kAllocClassBytes = 64;
inline constexpr std::size_t kAllocClasses = 16;  // up to 1 KiB; larger goes to malloc
inline constexpr std::size_t kAllocCacheDepth = 512;  // blocks kept per class per thread

void* task_alloc(std::size_t bytes);
void task_free(void* p, std::size_t bytes) noexcept;

}  // namespace sg::exec
