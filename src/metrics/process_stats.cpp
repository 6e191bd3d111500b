#include "metrics/process_stats.h"

#include <dirent.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace sg::metrics {

namespace {

// /proc/self/stat after the command name (which may hold spaces and parentheses): field 3
// (state) is tokens[0], so field n is tokens[n - 3].
std::optional<std::vector<std::string>> stat_fields() {
  std::ifstream f("/proc/self/stat");
  std::string line;
  if (!std::getline(f, line)) return std::nullopt;
  const auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> tokens;
  for (std::string t; rest >> t;) tokens.push_back(t);
  if (tokens.size() < 22) return std::nullopt;
  return tokens;
}

double boot_time_seconds() {
  std::ifstream f("/proc/stat");
  for (std::string key; f >> key;) {
    if (key == "btime") {
      double v = 0;
      f >> v;
      return v;
    }
    f.ignore(1 << 20, '\n');
  }
  return 0;
}

double open_fds() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  double n = 0;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n - 1;  // not the descriptor this listing held open
}

}  // namespace

std::optional<ThreadCpuStats> read_thread_cpu_stats(int tid) {
  if (tid <= 0) return std::nullopt;
  // Three numbers: nanoseconds on a CPU, nanoseconds waiting on a run queue, timeslices.
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/schedstat");
  double on_cpu_ns = 0, waiting_ns = 0;
  if (!(f >> on_cpu_ns >> waiting_ns)) return std::nullopt;
  return ThreadCpuStats{on_cpu_ns * 1e-9, waiting_ns * 1e-9};
}

std::optional<ProcessStats> read_process_stats(const std::vector<int>& worker_tids) {
  auto fields = stat_fields();
  if (!fields) return std::nullopt;
  const auto& t = *fields;
  // strtod, not stod: a field that is not a number reads as 0 instead of throwing from a
  // scrape.
  auto num = [&t](std::size_t field) { return std::strtod(t[field - 3].c_str(), nullptr); };
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  ProcessStats s;
  s.cpu_seconds = (num(14) + num(15)) / ticks;  // utime + stime
  s.start_time_seconds = boot_time_seconds() + num(22) / ticks;
  s.virtual_bytes = num(23);
  s.resident_bytes = num(24) * page;
  s.open_fds = open_fds();
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0) s.max_fds = static_cast<double>(lim.rlim_cur);
  for (int tid : worker_tids) s.workers.push_back(read_thread_cpu_stats(tid));
  return s;
}

std::optional<HeapStats> read_heap_stats() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  // Walks every arena's free chunks under its lock; once per scrape, off the workers.
  const struct mallinfo2 m = ::mallinfo2();
  return HeapStats{static_cast<double>(m.uordblks + m.hblkhd), static_cast<double>(m.fordblks + m.fsmblks)};
#else
  return std::nullopt;
#endif
}

}  // namespace sg::metrics
