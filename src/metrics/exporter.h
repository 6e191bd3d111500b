// The Prometheus exposition for /metrics. Nothing here runs on the data path: families are
// built at scrape time from the statistics snapshots every component publishes (executor
// worker counters, gateway atomics, cluster/endpoint state), then serialized with
// prometheus-cpp's TextSerializer. Labels come only from bounded sets: configured route,
// cluster, endpoint and listener names, worker index, a fixed method list, status class,
// admission scope and reason.
#pragma once

#include <string>

#include "proxy/gateway.h"

namespace sg::metrics {

std::string render(proxy::Gateway& gw);

}  // namespace sg::metrics
