// The Prometheus exposition for /metrics. Nothing here runs on the data path: families are
// built at scrape time from the statistics snapshots every component publishes (executor
// worker counters, gateway atomics, cluster/endpoint state), then serialized with
// prometheus-cpp's TextSerializer. Labels come only from bounded sets: configured route,
// cluster, endpoint and listener names, worker index, a fixed method list, status class,
// admission scope and reason.
#pragma once

#include <optional>
#include <string>

#include "metrics/process_stats.h"
#include "proxy/gateway.h"

namespace sg::metrics {

// `process`: the process collector's series (read_process_stats, which the admin server
// runs on the blocking pool); absent when nullopt.
std::string render(proxy::Gateway& gw, const std::optional<ProcessStats>& process = std::nullopt);

}  // namespace sg::metrics
