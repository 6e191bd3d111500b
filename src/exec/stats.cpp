#include "exec/stats.h"

#include <limits>

namespace sg::exec {

double DelayHistogram::upper_bound_seconds(std::size_t i) {
  if (i + 1 >= kDelayBuckets) return std::numeric_limits<double>::infinity();
  return static_cast<double>(uint64_t{1} << (i + kDelayFirstShift)) * 1e-9;
}

void PublishedHistogram::publish(const DelayHistogram& h) {
  constexpr auto r = std::memory_order_relaxed;
  // Nothing recorded since the last publish (the worker is its only writer): the stores
  // are skipped, which are most of a park's cost when the histograms are quiet.
  if (count.load(r) == h.count) return;
  for (std::size_t i = 0; i < kDelayBuckets; ++i) buckets[i].store(h.buckets[i], r);
  count.store(h.count, r);
  sum_ns.store(h.sum_ns, r);
}

void PublishedHistogram::load(DelayHistogram& h) const {
  constexpr auto r = std::memory_order_relaxed;
  for (std::size_t i = 0; i < kDelayBuckets; ++i) h.buckets[i] = buckets[i].load(r);
  h.count = count.load(r);
  h.sum_ns = sum_ns.load(r);
}

namespace {
void add_into(DelayHistogram& to, const DelayHistogram& from) {
  for (std::size_t i = 0; i < kDelayBuckets; ++i) to.buckets[i] += from.buckets[i];
  to.count += from.count;
  to.sum_ns += from.sum_ns;
}
}  // namespace

void PublishedWorkerStats::publish(const WorkerCounters& c) {
  constexpr auto r = std::memory_order_relaxed;  // independent counters; readers tolerate skew
  polls.store(c.polls, r);
  local_schedules.store(c.local_schedules, r);
  remote_polled.store(c.remote_polled, r);
  steals.store(c.steals, r);
  steal_operations.store(c.steal_operations, r);
  overflows.store(c.overflows, r);
  lifo_hits.store(c.lifo_hits, r);
  lifo_capped.store(c.lifo_capped, r);
  priority_schedules.store(c.priority_schedules, r);
  forced_yields.store(c.forced_yields, r);
  parks.store(c.parks, r);
  unparks.store(c.unparks, r);
  driver_polls.store(c.driver_polls, r);
  overdue_driver_polls.store(c.overdue_driver_polls, r);
  batch_yields.store(c.batch_yields, r);
  long_batch_yields.store(c.long_batch_yields, r);
  busy_ns.store(c.busy_ns, r);
  local_queue_depth.store(c.local_queue_depth, r);
  global_queue_interval.store(c.global_queue_interval, r);
  long_polls.store(c.long_polls, r);
  memory_reclaims.store(c.memory_reclaims, r);
  memory_reclaimed_bytes.store(c.memory_reclaimed_bytes, r);
  sched_delay.publish(c.sched_delay);
  poll_time.publish(c.poll_time);
}

WorkerCounters PublishedWorkerStats::load() const {
  constexpr auto r = std::memory_order_relaxed;
  WorkerCounters c;
  c.polls = polls.load(r);
  c.local_schedules = local_schedules.load(r);
  c.remote_polled = remote_polled.load(r);
  c.steals = steals.load(r);
  c.priority_schedules = priority_schedules.load(r);
  c.steal_operations = steal_operations.load(r);
  c.overflows = overflows.load(r);
  c.lifo_hits = lifo_hits.load(r);
  c.lifo_capped = lifo_capped.load(r);
  c.forced_yields = forced_yields.load(r);
  c.parks = parks.load(r);
  c.unparks = unparks.load(r);
  c.driver_polls = driver_polls.load(r);
  c.overdue_driver_polls = overdue_driver_polls.load(r);
  c.batch_yields = batch_yields.load(r);
  c.long_batch_yields = long_batch_yields.load(r);
  c.busy_ns = busy_ns.load(r);
  c.local_queue_depth = local_queue_depth.load(r);
  c.global_queue_interval = global_queue_interval.load(r);
  c.long_polls = long_polls.load(r);
  c.memory_reclaims = memory_reclaims.load(r);
  c.memory_reclaimed_bytes = memory_reclaimed_bytes.load(r);
  sched_delay.load(c.sched_delay);
  poll_time.load(c.poll_time);
  return c;
}

WorkerCounters RuntimeStats::total() const {
  WorkerCounters t;
  for (const auto& w : workers) {
    t.polls += w.polls;
    t.local_schedules += w.local_schedules;
    t.remote_polled += w.remote_polled;
    t.steals += w.steals;
    t.steal_operations += w.steal_operations;
    t.overflows += w.overflows;
    t.lifo_hits += w.lifo_hits;
    t.lifo_capped += w.lifo_capped;
    t.priority_schedules += w.priority_schedules;
    t.forced_yields += w.forced_yields;
    t.parks += w.parks;
    t.unparks += w.unparks;
    t.driver_polls += w.driver_polls;
    t.overdue_driver_polls += w.overdue_driver_polls;
    t.batch_yields += w.batch_yields;
    t.long_batch_yields += w.long_batch_yields;
    t.busy_ns += w.busy_ns;
    t.local_queue_depth += w.local_queue_depth;
    t.long_polls += w.long_polls;
    t.memory_reclaims += w.memory_reclaims;
    t.memory_reclaimed_bytes += w.memory_reclaimed_bytes;
    add_into(t.sched_delay, w.sched_delay);
    add_into(t.poll_time, w.poll_time);
  }
  return t;
}

}  // namespace sg::exec
