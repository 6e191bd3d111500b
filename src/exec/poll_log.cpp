#include "exec/poll_log.h"

#include <algorithm>
#include <mutex>

namespace sg::exec {

namespace {
bool slower(const SlowPoll& a, const SlowPoll& b) { return a.duration_ns > b.duration_ns; }
}  // namespace

void SlowPollLog::rotate(uint64_t now) {
  std::lock_guard lk(lock_);
  previous_ = std::move(current_);
  current_.clear();
  window_start_ = now;
  floor_ = 0;
}

void SlowPollLog::record(SlowPoll p) {
  if (window_over(p.ended_ns)) rotate(p.ended_ns);
  if (p.duration_ns <= floor_) return;
  std::lock_guard lk(lock_);
  if (current_.size() == kKeep) current_.pop_back();  // the fastest of the kept ones
  current_.insert(std::upper_bound(current_.begin(), current_.end(), p, slower), std::move(p));
  if (current_.size() == kKeep) floor_ = current_.back().duration_ns;
}

void SlowPollLog::collect(std::vector<SlowPoll>& out) const {
  std::lock_guard lk(lock_);
  out.insert(out.end(), current_.begin(), current_.end());
  out.insert(out.end(), previous_.begin(), previous_.end());
}

}  // namespace sg::exec
