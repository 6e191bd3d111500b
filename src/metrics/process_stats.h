// The process's own figures, as every Prometheus client library's process collector
// exports them (process_cpu_seconds_total, process_resident_memory_bytes, ...), so that
// the dashboards and alerts operators already have for other services work here too.
// Read from /proc at each scrape.
#pragma once

#include <optional>
#include <vector>

namespace sg::metrics {

// One thread's time as the kernel's scheduler accounts it (/proc/self/task/TID/schedstat):
// on a CPU, and runnable but waiting for one. The wait is what a worker loses to other
// busy threads on its CPUs (other processes, or more workers than CPUs). The executor's
// scheduling delay (wall time from runnable to polled) includes such waits but cannot
// tell them from a worker busy with other tasks; this tells them apart.
struct ThreadCpuStats {
  double cpu_seconds = 0;
  double wait_seconds = 0;
};

// nullopt where the kernel keeps no schedstat for the thread (CONFIG_SCHED_INFO off, or
// the thread has gone).
std::optional<ThreadCpuStats> read_thread_cpu_stats(int tid);

struct ProcessStats {
  double cpu_seconds = 0;          // user + system
  double resident_bytes = 0;
  double virtual_bytes = 0;
  double start_time_seconds = 0;  // Unix time
  double open_fds = 0;
  double max_fds = 0;             // the soft RLIMIT_NOFILE
  // The executor's workers, by index (read_process_stats' `worker_tids`); nullopt for a
  // worker whose figures could not be read.
  std::vector<std::optional<ThreadCpuStats>> workers;
};

// nullopt where /proc cannot be read (not Linux, or not mounted).
// `worker_tids`: the executor's worker threads (exec::Worker::os_thread_id), 0 for one
// not started.
std::optional<ProcessStats> read_process_stats(const std::vector<int>& worker_tids = {});

// The C library's malloc heap (glibc's mallinfo2, all arenas together): what lies beside
// the executor's own task memory in the resident figure. `free_bytes` is what the arenas
// keep between and after live chunks, resident or already given back with madvise: a
// large figure there is fragmentation, not a leak.
struct HeapStats {
  double in_use_bytes = 0;  // allocated chunks, mmapped ones included
  double free_bytes = 0;
};

// nullopt where the C library is not glibc (or is older than 2.33).
std::optional<HeapStats> read_heap_stats();

}  // namespace sg::metrics
