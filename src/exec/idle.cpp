#include "exec/idle.h"

#include <algorithm>

namespace sg::exec {

Idle::Idle(std::size_t num_workers)
    : state_(static_cast<uint32_t>(num_workers) << kUnparkShift),
      num_workers_(static_cast<uint32_t>(num_workers)) {
  sleepers_.reserve(num_workers);
}

bool Idle::notify_should_wakeup() {
  // fetch_add(0) rather than load: the RMW is a full barrier after the caller's push.
  uint32_t s = state_.fetch_add(0, std::memory_order_seq_cst);
  return (s & kSearchMask) == 0 && (s >> kUnparkShift) < num_workers_;
}

std::optional<std::size_t> Idle::worker_to_notify() {
  if (!notify_should_wakeup()) return std::nullopt;
  std::lock_guard lk(mu_);
  // Re-check under the lock: another notifier may have woken someone meanwhile.
  if (!notify_should_wakeup() || sleepers_.empty()) return std::nullopt;
  // One more unparked and one more searching.
  state_.fetch_add((1u << kUnparkShift) + 1, std::memory_order_seq_cst);
  std::size_t w = sleepers_.back();
  sleepers_.pop_back();
  return w;
}

bool Idle::transition_worker_to_searching() {
  uint32_t s = state_.load(std::memory_order_seq_cst);
  if (2 * (s & kSearchMask) >= num_workers_) return false;
  // Not a CAS: slightly exceeding the limit under a race is harmless (Tokio does the same).
  state_.fetch_add(1, std::memory_order_seq_cst);
  return true;
}

bool Idle::transition_worker_from_searching() {
  uint32_t prev = state_.fetch_sub(1, std::memory_order_seq_cst);
  return (prev & kSearchMask) == 1;
}

bool Idle::transition_worker_to_parked(std::size_t worker, bool is_searching) {
  std::lock_guard lk(mu_);
  uint32_t dec = (1u << kUnparkShift) + (is_searching ? 1u : 0u);
  uint32_t prev = state_.fetch_sub(dec, std::memory_order_seq_cst);
  sleepers_.push_back(worker);
  return is_searching && (prev & kSearchMask) == 1;
}

bool Idle::unpark_worker_by_id(std::size_t worker) {
  std::lock_guard lk(mu_);
  auto it = std::find(sleepers_.begin(), sleepers_.end(), worker);
  if (it == sleepers_.end()) return false;
  sleepers_.erase(it);
  state_.fetch_add(1u << kUnparkShift, std::memory_order_seq_cst);
  return true;
}

bool Idle::is_parked(std::size_t worker) {
  std::lock_guard lk(mu_);
  return std::find(sleepers_.begin(), sleepers_.end(), worker) != sleepers_.end();
}

uint32_t Idle::num_searching() const { return state_.load(std::memory_order_relaxed) & kSearchMask; }
uint32_t Idle::num_unparked() const { return state_.load(std::memory_order_relaxed) >> kUnparkShift; }

}  // namespace sg::exec
