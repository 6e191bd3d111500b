// Retry policy pieces of the upstream exchange: which failures a route retries, the
// cluster's retry budget, and in-flight counting.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "config/schema.h"
#include "upstream/cluster.h"

namespace sg::proxy {

inline bool retry_on(const config::RouteSection& r, config::RetryOn what) {
  return std::find(r.retries.on.begin(), r.retries.on.end(), what) != r.retries.on.end();
}

// Retry budget (Envoy's): retries in flight may not exceed budget_percent of the requests
// in flight, with a floor of min_retry_concurrency, so retries cannot amplify an outage.
class RetryBudget {
 public:
  RetryBudget(upstream::Cluster& c, const config::RetrySection& r) : c_(c), r_(r) {}
  ~RetryBudget() {
    if (holding_) c_.stats().retries_in_flight.fetch_sub(1, std::memory_order_relaxed);
  }
  RetryBudget(const RetryBudget&) = delete;
  RetryBudget& operator=(const RetryBudget&) = delete;
  bool try_take() {
    auto& s = c_.stats();
    int64_t active = s.active.load(std::memory_order_relaxed);
    int64_t allowed = std::max<int64_t>(r_.min_retry_concurrency, active * r_.budget_percent / 100);
    if (!holding_) {
      if (s.retries_in_flight.fetch_add(1, std::memory_order_relaxed) + 1 > allowed) {
        s.retries_in_flight.fetch_sub(1, std::memory_order_relaxed);
        s.retries_budget_exhausted.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
      holding_ = true;
    }
    s.retries.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

 private:
  upstream::Cluster& c_;
  const config::RetrySection& r_;
  bool holding_ = false;
};

// Counts one in flight for its lifetime.
struct InFlight {
  std::atomic<int64_t>& a;
  explicit InFlight(std::atomic<int64_t>& x) : a(x) { a.fetch_add(1, std::memory_order_relaxed); }
  ~InFlight() { a.fetch_sub(1, std::memory_order_relaxed); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
};

}  // namespace sg::proxy
