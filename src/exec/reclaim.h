// Memory an idle worker gives back.
//
// Why: the gateway's hot paths keep what they free for the next request (the task
// allocator's slabs, read buffers, parsers), which is what makes them cheap. After a
// spike, that memory would otherwise stay resident for the life of the process: 10,000
// connections held and closed left 11.6 MB more than before them, for good. A worker that
// has had nothing to do for RuntimeConfig::idle_memory_reclaim gives it back instead: the
// caches are emptied on its own thread (they are per thread), wholly free slabs go back
// to malloc, and malloc returns its free pages to the system. A worker that is busy, or
// idle for less, keeps everything: a reclaim costs a few hundred microseconds and the
// next burst's allocations.
#pragma once

#include <cstddef>

namespace sg::exec {

// Empties the calling thread's cache of something; returns the bytes it freed.
using IdleReclaimer = std::size_t (*)() noexcept;

// Registers `fn`, run on each worker thread that reclaims (at static initialisation, or
// at least before the runtime starts).
void add_idle_reclaimer(IdleReclaimer fn);

// On the calling thread: runs every registered reclaimer, then gives this thread's wholly
// free task-allocator slabs back (task_cache_trim) and malloc's free pages to the system.
// Returns the bytes the reclaimers and the trim freed.
std::size_t reclaim_idle_memory() noexcept;

}  // namespace sg::exec
