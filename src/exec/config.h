// RuntimeConfig: every tunable of the executor, each default a named constant with its
// provenance. The gateway's YAML `runtime:` block maps onto this struct one to one.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "exec/poll_log.h"

namespace sg::exec {

// Capacity of each worker's local run queue. Tokio: queue.rs LOCAL_QUEUE_CAPACITY = 256.
// Large enough that a burst of wake-ups stays local, small enough that overflow (half the
// queue) is a cheap batch. A power of two: indices are masked, never reduced modulo.
inline constexpr uint32_t kLocalQueueCapacity = 256;

// Ticks between checks of the injection queue before the local queue. Tokio: worker.rs
// (61, a prime so it does not resonate with event_interval-sized task batches).
inline constexpr uint32_t kDefaultGlobalQueueInterval = 61;

// Ticks between non-blocking polls of the I/O driver + maintenance by a busy worker.
// Tokio: builder.rs event_interval = 61.
inline constexpr uint32_t kDefaultEventInterval = 61;

// Operations a task may complete per scheduling before it is forced to yield.
// Tokio: coop.rs Budget::initial() = 128.
inline constexpr uint32_t kDefaultCoopBudget = 128;

// Consecutive LIFO-slot polls per tick before the slot is bypassed. Tokio: worker.rs
// MAX_LIFO_POLLS_PER_TICK = 3 ("picked out of thin air"; tokio#5712 shows why a cap exists).
inline constexpr uint32_t kDefaultMaxLifoPollsPerTick = 3;

// Upper bound of the elastic blocking pool. Tokio: builder.rs max_blocking_threads = 512.
inline constexpr std::size_t kDefaultMaxBlockingThreads = 512;

// Idle blocking threads exit after this long. Tokio: builder.rs keep_alive = 10 s.
inline constexpr std::chrono::milliseconds kDefaultBlockingKeepAlive{10'000};

// Worker thread stack. Tokio: 2 MiB. Coroutine frames live on the heap, so workers need
// little stack; this leaves room for deep synchronous parsing code.
inline constexpr std::size_t kDefaultThreadStackSize = 2u << 20;

// Completions handled per driver poll before the worker returns to its queues. Tokio's
// mio event capacity is 1024.
inline constexpr uint32_t kDefaultMaxIoEventsPerTick = 1024;

// Adaptive global queue interval (tokio#5720): aim to check the injection queue every
// 200 us of task polling; EWMA weight 0.1; clamp to [2, 127].
inline constexpr std::chrono::nanoseconds kTargetGlobalQueueIntervalTime{200'000};
inline constexpr uint32_t kMinGlobalQueueInterval = 2;
inline constexpr uint32_t kMaxGlobalQueueInterval = 127;

// A worker idle this long gives back cached memory (reclaim.h). Long enough that a worker
// between the requests of a steady trickle keeps its caches warm; short enough that the
// memory of a spike is back before anyone looks at a dashboard.
inline constexpr std::chrono::milliseconds kDefaultIdleMemoryReclaim{1'000};

// A poll this long is counted and reported as a long poll: something blocks a worker.
// Tokio's guidance is 10-100 us between awaits; 10 ms is far past anything the gateway's
// own tasks do, so a report means real blocking work (a slow DNS call, a huge config).
inline constexpr std::chrono::nanoseconds kDefaultLongPollThreshold{10'000'000};
inline constexpr std::chrono::nanoseconds kDefaultDriverVisitAfterPoll{100'000};

struct RuntimeConfig {
  // 0 = the CPUs available to the process (affinity mask and cgroup cpu.max quota).
  std::size_t worker_threads = 0;
  uint32_t global_queue_interval = kDefaultGlobalQueueInterval;
  // When true, global_queue_interval is only the starting point: each worker retunes it
  // from an EWMA of its poll times so injected tasks wait about 200 us at most.
  bool adaptive_global_queue_interval = false;
  uint32_t event_interval = kDefaultEventInterval;
  uint32_t coop_budget = kDefaultCoopBudget;
  uint32_t max_lifo_polls_per_tick = kDefaultMaxLifoPollsPerTick;
  // Policy switches, to measure what each mechanism is worth (Pingora ships a no-steal
  // runtime for exactly this reason).
  bool lifo_slot = true;
  bool work_stealing = true;
  std::size_t max_blocking_threads = kDefaultMaxBlockingThreads;
  std::chrono::milliseconds blocking_keep_alive = kDefaultBlockingKeepAlive;
  std::size_t thread_stack_size = kDefaultThreadStackSize;
  uint32_t max_io_events_per_tick = kDefaultMaxIoEventsPerTick;
  std::string thread_name = "sg-worker";
  // Per-task records (task_diag.h) for /debug/tasks: kind, name, polls, busy and queued
  // time, wakes by source. Off: tasks carry only their kind. Off by default in the library:
  // a record doubles the cost of a tiny task (spawn_many_local: 381 -> 769 instructions per
  // task); the gateway turns it on (runtime.task_diagnostics), where it adds 1.3% to a
  // proxied request's user-space instructions.
  bool task_diagnostics = false;
  // Times every poll: the per-worker poll-time histogram, long polls (counted, reported to
  // on_long_poll) and the slowest-polls log; the poll's start reading is also its tick_now.
  // Off by default in the library (Tokio's poll-time histogram is opt-in too): two clock
  // reads per poll are a third of a yield's cost. task_diagnostics needs it and turns it
  // on; the gateway always runs with it.
  bool poll_timing = false;
  std::chrono::nanoseconds long_poll_threshold = kDefaultLongPollThreshold;
  // With poll_timing: a poll at least this long makes its worker poll the I/O driver right
  // after it, not only every event_interval ticks (Worker::visit_driver_after); 0: never.
  std::chrono::nanoseconds driver_visit_after_poll = kDefaultDriverVisitAfterPoll;
  // A worker that runs dry with completions (maybe) ready in its driver yields its CPU
  // (sched_yield) before taking them (Worker::run; on io_uring once a batch's submissions
  // are flushed, on epoll before it looks). Only the ring's own worker can take a ring's
  // completions, so on CPUs shared with other busy threads (its sibling workers among
  // them), a worker that never runs dry would otherwise keep its CPU until the kernel's
  // tick preempts it, while the connections of a worker waiting for that CPU wait as long
  // (a tick is 4 ms at HZ=250). With no other thread waiting for the CPU, the yield
  // returns at once.
  // Measured on 2 CPUs shared with the load generator and the backend (2 workers, small
  // keep-alive GETs): p99 4.6 -> 1.2-1.4 ms, req/s and CPU per request unchanged or
  // better; on epoll, see io/reactor.h. The price: a CPU-bound thread waiting for the CPU
  // takes it for a whole slice (beside one busy loop: p99 5.1 -> 7.8 ms, 0.95x req/s),
  // counted as long yields.
  bool yield_between_batches = true;
  // Called on the worker, at most once a second per worker, for a long poll.
  LongPollHook on_long_poll = nullptr;
  // A worker parked this long after running tasks reclaims idle memory (reclaim.h); 0:
  // never. With poll_timing, polls of background kinds (health checks, the admin
  // endpoint, probes, maintenance) do not count as running tasks; without it, every poll
  // does.
  std::chrono::milliseconds idle_memory_reclaim = kDefaultIdleMemoryReclaim;
};

// CPUs this process may run on: sched_getaffinity, further capped by a cgroup v2
// cpu.max quota when one is set (rounded up). Never less than 1.
std::size_t available_parallelism();

// Fills worker_threads when it is 0; clamps the other fields into valid ranges.
RuntimeConfig resolve(RuntimeConfig cfg);

}  // namespace sg::exec
