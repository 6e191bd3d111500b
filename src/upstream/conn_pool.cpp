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

std::optional<io::Stream> ConnPool::acquire(bool replayable) {
  Slot* slot = own_slot();
  if (slot == nullptr) return std::nullopt;
  auto now = exec::tick_now();
  while (!slot->idle.empty()) {
    Idle got = std::move(slot->idle.back());
    slot->idle.pop_back();
    slot->count.store(slot->idle.size(), std::memory_order_relaxed);
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
  return std::nullopt;
}

void ConnPool::release(io::Stream s) {
  Slot* slot = own_slot();
  if (slot == nullptr || opts_.max_idle == 0 || !s.is_open() || slot->idle.size() >= per_worker_max_) {
    s.close();
    return;
  }
  slot->idle.push_back({std::move(s), exec::tick_now()});
  slot->count.store(slot->idle.size(), std::memory_order_relaxed);
}

std::size_t ConnPool::reap() {
  Slot* slot = own_slot();
  if (slot == nullptr) return 0;
  const auto now = exec::tick_now();
  std::size_t closed = 0;
  for (auto it = slot->idle.begin(); it != slot->idle.end();) {
    // Expired, or closed by the upstream (EOF or bytes nobody asked for): a socket nobody
    // will reuse should not hold a file descriptor until the next acquire finds it.
    const bool expired = now - it->since >= opts_.idle_timeout;
    if (expired || !it->stream.silent()) {
      if (!expired) reaped_stale_.fetch_add(1, std::memory_order_relaxed);
      it->stream.close();
      it = slot->idle.erase(it);
      ++closed;
    } else {
      ++it;
    }
  }
  slot->count.store(slot->idle.size(), std::memory_order_relaxed);
  return closed;
}

std::size_t ConnPool::idle() const {
  std::size_t n = 0;
  for (std::size_t i = 0; i < opts_.workers; ++i) n += slots_[i].count.load(std::memory_order_relaxed);
  return n;
}

}  // namespace sg::upstream
