#include "upstream/conn_pool.h"

namespace sg::upstream {

std::optional<io::TcpStream> ConnPool::acquire(bool replayable) {
  auto now = exec::tick_now();
  for (;;) {
    Idle got;
    {
      std::lock_guard lk(mu_);
      if (idle_.empty()) return std::nullopt;
      got = std::move(idle_.back());
      idle_.pop_back();
    }
    // Too old, or closed/reset by the upstream while idle, or it sent unsolicited bytes
    // (say a 408 before closing, which would pass for the next request's response): never
    // reuse it.
    const auto idle_for = now - got.since;
    const bool check = !replayable || idle_for >= kCheckAfter;
    if (idle_for >= opts_.idle_timeout) {
      got.stream.close();
      continue;
    }
    if (check && !got.stream.silent()) {
      stale_.fetch_add(1, std::memory_order_relaxed);
      got.stream.close();
      continue;
    }
    return std::move(got.stream);
  }
}

void ConnPool::release(io::TcpStream s) {
  if (opts_.max_idle == 0 || !s.is_open()) {
    s.close();
    return;
  }
  std::unique_lock lk(mu_);
  if (idle_.size() >= opts_.max_idle) {
    lk.unlock();
    s.close();
    return;
  }
  idle_.push_back({std::move(s), exec::tick_now()});
}

std::size_t ConnPool::reap() {
  auto now = exec::tick_now();
  std::deque<Idle> expired;
  {
    std::lock_guard lk(mu_);
    while (!idle_.empty() && now - idle_.front().since >= opts_.idle_timeout) {
      expired.push_back(std::move(idle_.front()));
      idle_.pop_front();
    }
  }
  for (auto& e : expired) e.stream.close();
  return expired.size();
}

void ConnPool::clear() {
  std::deque<Idle> all;
  {
    std::lock_guard lk(mu_);
    all.swap(idle_);
  }
  for (auto& e : all) e.stream.close();
}

std::size_t ConnPool::idle() const {
  std::lock_guard lk(mu_);
  return idle_.size();
}

}  // namespace sg::upstream
