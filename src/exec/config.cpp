#include "exec/config.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

namespace sg::exec {

namespace {

// cgroup v2 "cpu.max" holds "<quota> <period>" or "max <period>".
std::size_t cgroup_cpu_limit() {
  std::ifstream f("/sys/fs/cgroup/cpu.max");
  std::string quota;
  double period = 0;
  if (!(f >> quota >> period) || quota == "max" || period <= 0) return 0;
  double q = std::strtod(quota.c_str(), nullptr);
  if (q <= 0) return 0;
  return static_cast<std::size_t>(std::ceil(q / period));
}

}  // namespace

std::size_t available_parallelism() {
  std::size_t n = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    n = static_cast<std::size_t>(CPU_COUNT(&set));
  }
  if (n == 0) n = 1;
  if (std::size_t quota = cgroup_cpu_limit(); quota > 0) n = std::min(n, quota);
  return std::max<std::size_t>(n, 1);
}

RuntimeConfig resolve(RuntimeConfig cfg) {
  if (cfg.worker_threads == 0) cfg.worker_threads = available_parallelism();
  // The idle counters pack unparked/searching counts into 16 bits each.
  cfg.worker_threads = std::min<std::size_t>(cfg.worker_threads, 4096);
  cfg.global_queue_interval =
      std::clamp(cfg.global_queue_interval, kMinGlobalQueueInterval, 1u << 20);
  cfg.event_interval = std::max(cfg.event_interval, 1u);
  cfg.coop_budget = std::max(cfg.coop_budget, 1u);
  cfg.max_blocking_threads = std::max<std::size_t>(cfg.max_blocking_threads, 1);
  cfg.max_io_events_per_tick = std::max(cfg.max_io_events_per_tick, 1u);
  cfg.thread_stack_size = std::max<std::size_t>(cfg.thread_stack_size, 64u << 10);
  if (cfg.task_diagnostics) cfg.poll_timing = true;  // a record's busy and queued times are poll times
  return cfg;
}

}  // namespace sg::exec
