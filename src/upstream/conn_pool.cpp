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

std::optional<std::size_t> ConnPool::own_index() const {
  const exec::ThreadContext& c = exec::tl_ctx;
  if (c.worker == nullptr || c.worker_index >= opts_.workers) return std::nullopt;
  return c.worker_index;
}

std::optional<ConnPool::Idle> ConnPool::pop_newest(Slot& slot) {
  if (slot.count.load(std::memory_order_relaxed) == 0) return std::nullopt;  // skip the lock
  std::lock_guard g(slot.mu);
  if (slot.idle.empty()) return std::nullopt;
  Idle got = std::move(slot.idle.back());
  slot.idle.pop_back();
  slot.count.store(slot.idle.size(), std::memory_order_relaxed);
  return got;
}

bool ConnPool::push_if_room(Slot& slot, io::Stream& s) {
  std::lock_guard g(slot.mu);
  if (slot.idle.size() >= per_worker_max_) return false;
  slot.idle.push_back({std::move(s), exec::tick_now()});
  slot.count.store(slot.idle.size(), std::memory_order_relaxed);
  return true;
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
  const std::optional<std::size_t> own = own_index();
  if (!own) return std::nullopt;
  const auto now = exec::tick_now();
  // Own list first, then the others in turn from the next worker on; each connection is
  // checked (a syscall, perhaps a close) outside the lock it was taken under.
  for (std::size_t k = 0; k < opts_.workers; ++k) {
    Slot& slot = slots_[(*own + k) % opts_.workers];
    while (std::optional<Idle> got = pop_newest(slot)) {
      if (usable(*got, now, replayable)) return std::move(got->stream);
    }
  }
  return std::nullopt;
}

void ConnPool::release(io::Stream s) {
  const std::optional<std::size_t> own = own_index();
  // A request still being sent (the upstream answered early), or one that failed to go
  // out, leaves the connection mid-message: never reused.
  if (!own || opts_.max_idle == 0 || !s.is_open() || !s.tcp().writes_done()) {
    s.close();
    return;
  }
  if (idle() < opts_.max_idle) {
    for (std::size_t k = 0; k < opts_.workers; ++k) {
      if (push_if_room(slots_[(*own + k) % opts_.workers], s)) return;
    }
  }
  s.close();
}

std::size_t ConnPool::reap() {
  const std::optional<std::size_t> own = own_index();
  if (!own) return 0;
  Slot& slot = slots_[*own];
  const auto now = exec::tick_now();
  // Take the list out, check it unlocked (a MSG_PEEK recv each), and put the live ones
  // back in front of whatever was released meanwhile (which is newer).
  std::vector<Idle> list;
  {
    std::lock_guard g(slot.mu);
    list.swap(slot.idle);
    slot.count.store(0, std::memory_order_relaxed);
  }
  std::size_t closed = 0;
  std::vector<Idle> live;
  for (Idle& it : list) {
    // Expired, or closed by the upstream (EOF or bytes nobody asked for): a socket nobody
    // will reuse should not hold a file descriptor until the next acquire finds it.
    const bool expired = now - it.since >= opts_.idle_timeout;
    if (expired || !it.stream.silent()) {
      if (!expired) reaped_stale_.fetch_add(1, std::memory_order_relaxed);
      it.stream.close();
      ++closed;
    } else {
      live.push_back(std::move(it));
    }
  }
  std::lock_guard g(slot.mu);
  for (auto& n : slot.idle) live.push_back(std::move(n));
  slot.idle.swap(live);
  slot.count.store(slot.idle.size(), std::memory_order_relaxed);
  return closed;
}

std::size_t ConnPool::idle() const {
  std::size_t n = 0;
  for (std::size_t i = 0; i < opts_.workers; ++i) n += slots_[i].count.load(std::memory_order_relaxed);
  return n;
}

}  // namespace sg::upstream
