// The process's own figures, as every Prometheus client library's process collector
// exports them (process_cpu_seconds_total, process_resident_memory_bytes, ...), so that
// the dashboards and alerts operators already have for other services work here too.
// Read from /proc at each scrape.
#pragma once

#include <optional>

namespace sg::metrics {

struct ProcessStats {
  double cpu_seconds = 0;          // user + system
  double resident_bytes = 0;
  double virtual_bytes = 0;
  double start_time_seconds = 0;  // Unix time
  double open_fds = 0;
  double max_fds = 0;             // the soft RLIMIT_NOFILE
};

// nullopt where /proc cannot be read (not Linux, or not mounted).
std::optional<ProcessStats> read_process_stats();

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
