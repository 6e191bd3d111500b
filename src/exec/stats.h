// Executor statistics. Each worker counts into plain (non-atomic) fields it alone writes;
// it publishes them into atomics every maintenance tick and when it parks (Tokio's
// Stats::submit), so counting costs an increment and readers never touch the hot path.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <atomic>
#include <cstdint>
#include <vector>

namespace sg::exec {

// Log2 buckets of a duration in nanoseconds (scheduling delay, poll time): bucket i holds
// durations < 2^(i+10) ns (i.e. < 1.02 us, < 2.05 us, ... ), the last bucket is unbounded.
// 1 us .. ~2.1 s.
inline constexpr std::size_t kDelayBuckets = 22;
inline constexpr int kDelayFirstShift = 10;

struct DelayHistogram {
  std::array<uint64_t, kDelayBuckets> buckets{};
  uint64_t count = 0;
  uint64_t sum_ns = 0;

  void record(uint64_t ns) {
    // The bucket is the bit width of ns >> 10 (0 below 1.02 us), capped at the last one.
    const auto b = std::min<std::size_t>(static_cast<std::size_t>(std::bit_width(ns >> kDelayFirstShift)),
                                         kDelayBuckets - 1);
    ++buckets[b];
    ++count;
    sum_ns += ns;
  }
  // Upper bound of bucket i in seconds (+inf for the last).
  static double upper_bound_seconds(std::size_t i);
};

// Worker-local counters. Monotonic except local_queue_depth (a gauge).
struct WorkerCounters {
  uint64_t polls = 0;              // task polls
  uint64_t local_schedules = 0;    // tasks scheduled from this worker onto itself
  uint64_t remote_polled = 0;      // tasks this worker took from the injection queue
  uint64_t steals = 0;             // tasks stolen from other workers
  uint64_t steal_operations = 0;   // successful steal operations
  uint64_t overflows = 0;          // times half the local queue moved to the injection queue
  uint64_t lifo_hits = 0;          // polls of a task taken from the LIFO slot
  uint64_t lifo_capped = 0;        // ticks where the LIFO slot hit max_lifo_polls_per_tick
  uint64_t priority_schedules = 0; // wake-ups queued in the priority lane
  uint64_t forced_yields = 0;      // yields forced by an exhausted coop budget
  uint64_t parks = 0;              // times the worker went to sleep
  uint64_t unparks = 0;            // times it woke up
  uint64_t driver_polls = 0;       // polls of the I/O driver (blocking or not)
  uint64_t overdue_driver_polls = 0;  // of those, right after a long poll (driver_visit_after_poll)
  uint64_t batch_yields = 0;       // CPU yields between two batches of its ring (yield_between_batches)
  uint64_t long_batch_yields = 0;  // of those, yields that gave the CPU away for a whole slice
  uint64_t busy_ns = 0;            // time not parked
  uint64_t local_queue_depth = 0;  // gauge, at publication time
  uint64_t global_queue_interval = 0;  // gauge: current (possibly adaptive) interval
  uint64_t long_polls = 0;         // polls that took at least RuntimeConfig::long_poll_threshold
  uint64_t memory_reclaims = 0;    // idle memory reclaims (reclaim.h)
  uint64_t memory_reclaimed_bytes = 0;  // bytes they gave back to malloc
  DelayHistogram sched_delay;      // runnable -> polled, sampled
  DelayHistogram poll_time;        // every poll's duration
};

// A DelayHistogram published for readers on other threads.
struct PublishedHistogram {
  std::array<std::atomic<uint64_t>, kDelayBuckets> buckets{};
  std::atomic<uint64_t> count{0}, sum_ns{0};
  void publish(const DelayHistogram& h);
  void load(DelayHistogram& h) const;
};

// One worker's published copy (cache-line aligned so workers never share a line).
struct alignas(64) PublishedWorkerStats {
  std::atomic<uint64_t> polls{0}, local_schedules{0}, remote_polled{0}, steals{0},
      steal_operations{0}, overflows{0}, lifo_hits{0}, lifo_capped{0}, priority_schedules{0}, forced_yields{0},
      parks{0}, unparks{0}, driver_polls{0}, overdue_driver_polls{0}, batch_yields{0}, long_batch_yields{0},
      busy_ns{0}, local_queue_depth{0}, global_queue_interval{0}, long_polls{0}, memory_reclaims{0},
      memory_reclaimed_bytes{0};
  PublishedHistogram sched_delay, poll_time;

  void publish(const WorkerCounters& c);
  WorkerCounters load() const;
};

struct RuntimeStats {
  std::vector<WorkerCounters> workers;
  uint64_t injection_queue_depth = 0;
  uint64_t remote_schedules = 0;      // tasks scheduled from outside any worker
  uint64_t blocking_threads = 0;      // live blocking-pool threads
  uint64_t blocking_idle_threads = 0;
  uint64_t blocking_queue_depth = 0;

  // Totals across workers (for tests and summaries).
  WorkerCounters total() const;
};

}  // namespace sg::exec
