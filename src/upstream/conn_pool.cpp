#include "upstream/conn_pool.h"

#include <algorithm>

#include "exec/context.h"

namespace sg::upstream {

ConnPool::ConnPool(PoolOptions opts)
    : opts_(opts),
      per_worker_max_(opts.workers == 0 ? opts.max_idle : (opts.max_idle + opts.workers - 1) / opts.workers),
      slots_(std::make_unique<Slot[]>(std::max<std::size_t>(opts.workers, 1))) {
  opts_.workers = std::max<std::size_t>(opts.workers, 1);
}

ConnPool::Slot* ConnPool::own_slot() const {
  const exec::ThreadContext& c = exec::tl_ctx;
  if (c.worker == nullptr || c.worker_index >= opts_.workers) return nullptr;
  return &slots_[c.worker_index];
}

bool ConnPool::usable(Idle& got, std::chrono::steady_clock::time_point now, bool replayable) {
  // Too old, or closed/reset by the upstream while idle, or it sent unsolicited bytes (say
  // a 408 before closing, which would pass for the next request's response): never reuse it.
  const auto idle_for = now - got.since;
  if (idle_for >= opts_.idle_timeout) {
    got.stream.close();
    return false;
  }
  const bool check = !replayable || idle_for >= kCheckAfter;
  if (check && !got.stream.silent()) {
    stale_.fetch_add(1, std::memory_order_relaxed);
    got.stream.close();
    return false;
  }
  return true;
}

std::optional<io::Stream> ConnPool::acquire(bool replayable) {
  Slot* slot = own_slot();
  if (slot == nullptr) return std::nullopt;
  const auto now = exec::tick_now();
  while (!slot->idle.empty()) {
    Idle got = std::move(slot->idle.back());
    slot->idle.pop_back();
    slot->count.store(slot->idle.size(), std::memory_order_relaxed);
    if (usable(got, now, replayable)) return std::move(got.stream);
  }
  return acquire_shared(now, replayable);
}

std::optional<io::Stream> ConnPool::acquire_shared(std::chrono::steady_clock::time_point now, bool replayable) {
  if (shared_count_.load(std::memory_order_relaxed) == 0) return std::nullopt;
  for (;;) {
    Idle got;
    {
      std::lock_guard g(shared_mu_);
      if (shared_.empty()) return std::nullopt;
      got = std::move(shared_.back());
      shared_.pop_back();
      shared_count_.store(shared_.size(), std::memory_order_relaxed);
    }
    // Checked (a syscall, perhaps a close) outside the lock.
    if (usable(got, now, replayable)) return std::move(got.stream);
  }
}

void ConnPool::release(io::Stream s) {
  Slot* slot = own_slot();
  if (slot == nullptr || opts_.max_idle == 0 || !s.is_open()) {
    s.close();
    return;
  }
  if (slot->idle.size() < per_worker_max_) {
    slot->idle.push_back({std::move(s), exec::tick_now()});
    slot->count.store(slot->idle.size(), std::memory_order_relaxed);
    return;
  }
  {
    std::lock_guard g(shared_mu_);
    if (idle() < opts_.max_idle) {
      shared_.push_back({std::move(s), exec::tick_now()});
      shared_count_.store(shared_.size(), std::memory_order_relaxed);
      return;
    }
  }
  s.close();
}

std::size_t ConnPool::reap_list(std::deque<Idle>& list, std::chrono::steady_clock::time_point now) {
  std::size_t closed = 0;
  for (auto it = list.begin(); it != list.end();) {
    // Expired, or closed by the upstream (EOF or bytes nobody asked for): a socket nobody
    // will reuse should not hold a file descriptor until the next acquire finds it.
    const bool expired = now - it->since >= opts_.idle_timeout;
    if (expired || !it->stream.silent()) {
      if (!expired) reaped_stale_.fetch_add(1, std::memory_order_relaxed);
      it->stream.close();
      it = list.erase(it);
      ++closed;
    } else {
      ++it;
    }
  }
  return closed;
}

std::size_t ConnPool::reap() {
  Slot* slot = own_slot();
  if (slot == nullptr) return 0;
  const auto now = exec::tick_now();
  std::size_t closed = reap_list(slot->idle, now);
  slot->count.store(slot->idle.size(), std::memory_order_relaxed);
  // Every worker's reaper passes here; whichever gets the lock reaps the shared list.
  std::unique_lock g(shared_mu_, std::try_to_lock);
  if (g.owns_lock()) {
    closed += reap_list(shared_, now);
    shared_count_.store(shared_.size(), std::memory_order_relaxed);
  }
  return closed;
}

std::size_t ConnPool::idle() const {
  std::size_t n = 0;
  for (std::size_t i = 0; i < opts_.workers; ++i) n += slots_[i].count.load(std::memory_order_relaxed);
  n += shared_count_.load(std::memory_order_relaxed);
  return n;
}

}  // namespace sg::upstream
