// What a worker remembers about its slow polls: the slowest few of the current and the
// previous window (for /debug/tasks), and the rate limit of long-poll reports.
//
// The worker alone records (record() under the log's lock, only for a poll slower than
// floor(), so after the first few polls of a window nearly every poll skips it); readers
// on other threads take the same lock to copy the entries.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "exec/spin_lock.h"
#include "exec/task_diag.h"

namespace sg::exec {

struct SlowPoll {
  uint64_t duration_ns = 0;
  uint64_t ended_ns = 0;  // now_ns() clock
  uint64_t task_id = 0;   // 0 without task diagnostics
  TaskKind kind = TaskKind::kTask;
  uint32_t worker = 0;
  std::string name;
};

// A poll over RuntimeConfig::long_poll_threshold, as handed to the long-poll hook.
struct LongPoll {
  SlowPoll poll;
  uint64_t unreported = 0;  // further long polls on this worker since the previous report
};
using LongPollHook = void (*)(const LongPoll&);

class SlowPollLog {
 public:
  static constexpr std::size_t kKeep = 8;
  static constexpr uint64_t kWindowNs = 10'000'000'000;  // 10 s

  // Worker thread only: a poll of at most this long cannot enter the current window.
  uint64_t floor() const noexcept { return floor_; }
  bool window_over(uint64_t now) const noexcept { return now - window_start_ >= kWindowNs; }
  // Worker thread only.
  void record(SlowPoll p);
  // Any thread: the entries of both windows, slowest first.
  void collect(std::vector<SlowPoll>& out) const;

 private:
  void rotate(uint64_t now);

  mutable SpinLock lock_;
  std::vector<SlowPoll> current_, previous_;  // under lock_
  uint64_t window_start_ = 0;                 // worker thread
  uint64_t floor_ = 0;                        // worker thread
};

// Rate limit of long-poll reports: at most one per worker per kReportEveryNs, counting
// the ones it holds back.
class LongPollLimiter {
 public:
  static constexpr uint64_t kReportEveryNs = 1'000'000'000;
  // True when this long poll should be reported; `unreported` is then how many were held
  // back since the previous report.
  bool admit(uint64_t now, uint64_t& unreported) noexcept {
    if (last_ns_ != 0 && now - last_ns_ < kReportEveryNs) {
      ++held_;
      return false;
    }
    last_ns_ = now;
    unreported = held_;
    held_ = 0;
    return true;
  }

 private:
  uint64_t last_ns_ = 0;
  uint64_t held_ = 0;
};

}  // namespace sg::exec
