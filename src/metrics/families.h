// The exporter's building blocks (metrics/exporter.cpp), shared with the files that fill
// some of its families: a scrape's list of families, their labels, and the one config
// snapshot a scrape reads.
#pragma once

#include <prometheus/metric_family.h>

#include <deque>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/latency_histogram.h"
#include "proxy/gateway.h"

namespace sg::metrics::detail {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;
// One snapshot for the whole scrape: a reload meanwhile does not mix two configurations.
using Snap = std::shared_ptr<const proxy::Snapshot>;

struct Families {
  // A deque: family() hands out references that must stay valid while more families are
  // added (a vector would reallocate under them).
  std::deque<MetricFamily> out;

  MetricFamily& family(std::string name, std::string help, MetricType type) {
    out.push_back(MetricFamily{std::move(name), std::move(help), type, {}});
    return out.back();
  }
  static void add(MetricFamily& f, Labels labels, double v) {
    ClientMetric m;
    m.label = std::move(labels);
    if (f.type == MetricType::Counter) m.counter.value = v;
    else m.gauge.value = v;
    f.metric.push_back(std::move(m));
  }
  void scalar(std::string name, std::string help, MetricType type, double v) {
    add(family(std::move(name), std::move(help), type), {}, v);
  }
};

inline void add_histogram(MetricFamily& f, Labels labels, const AtomicHistogram& h) {
  ClientMetric m;
  m.label = std::move(labels);
  uint64_t cum = 0;
  for (std::size_t i = 0; i < kLatencyBuckets.size(); ++i) {
    cum += h.buckets[i].load(std::memory_order_relaxed);
    m.histogram.bucket.push_back({cum, kLatencyBuckets[i]});
  }
  cum += h.buckets.back().load(std::memory_order_relaxed);
  m.histogram.bucket.push_back({cum, std::numeric_limits<double>::infinity()});
  m.histogram.sample_count = cum;
  m.histogram.sample_sum = static_cast<double>(h.sum_ns.load(std::memory_order_relaxed)) * 1e-9;
  f.metric.push_back(std::move(m));
}

// Upstream clusters and their endpoints (metrics/upstream_families.cpp).
void upstream_families(Families& fs, const Snap& snap);

}  // namespace sg::metrics::detail
