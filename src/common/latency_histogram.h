// A fixed-bucket latency histogram of relaxed atomics: observed on the data path from any
// worker (no lock), read by the Prometheus collector at scrape time. Buckets are shared by
// every latency metric so that dashboards can compare them.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

namespace sg {

// Bucket upper bounds, seconds.
inline constexpr std::array<double, 14> kLatencyBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                           0.1,    0.25,  0.5,    1.0,   2.5,   5.0,  10.0};

struct AtomicHistogram {
  std::array<std::atomic<uint64_t>, kLatencyBuckets.size() + 1> buckets{};  // last = +Inf
  std::atomic<uint64_t> count{0};
  std::atomic<uint64_t> sum_ns{0};

  // Relaxed: independent counters; a scrape may see a sample in `count` before its bucket.
  void observe(uint64_t ns) {
    double s = static_cast<double>(ns) * 1e-9;
    std::size_t i = 0;
    while (i < kLatencyBuckets.size() && s > kLatencyBuckets[i]) ++i;
    buckets[i].fetch_add(1, std::memory_order_relaxed);
    count.fetch_add(1, std::memory_order_relaxed);
    sum_ns.fetch_add(ns, std::memory_order_relaxed);
  }
};

}  // namespace sg
