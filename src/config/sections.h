// The tables of stealgate.yaml's sections (config/fields.h). Internal to src/config.
#pragma once

#include <vector>

#include "config/fields.h"
#include "config/schema.h"

namespace sg::config::detail {

// The words of a TLS version (listeners' and clusters' min_version).
extern const std::vector<std::pair<std::string, TlsVersion>> kTlsVersions;

// The whole file: loader.cpp reads it, printer.cpp prints it.
const Table<Config>& config_table();

// sections_server.cpp
const Table<RuntimeSection>& runtime_table();
const Table<AdminSection>& admin_table();
const Table<ListenerSection>& listener_table();
const Table<ListenerTls>& listener_tls_table();
const Table<TlsCertificate>& certificate_table();
const Table<LimitsSection>& limits_table();
const Table<LoggingSection>& logging_table();
const Table<LoggingSection>& access_log_table();

// sections_upstream.cpp
const Table<ClusterSection>& cluster_table();
const Table<EndpointSection>& endpoint_table();
const Table<HealthCheckSection>& health_check_table();
const Table<OutlierSection>& outlier_table();
const Table<ClusterTls>& cluster_tls_table();

// sections_routes.cpp
const Table<RouteSection>& route_table();
const Table<RouteMatchSection>& match_table();
const Table<RouteSection>& rewrite_table();
const Table<DirectResponseSection>& direct_response_table();
const Table<RedirectSection>& redirect_table();
const Table<HeaderOps>& header_ops_table();
const Table<RetrySection>& retries_table();
const Table<RateLimitSection>& rate_limit_table();
// "" for an IP address or block (`10.0.0.0/8`), else why not: an item check for F::strings.
std::string address_block_refusal(std::string& v);

// Every table, in the order config/README.md shows them.
std::vector<ReferenceTable> reference_tables();

}  // namespace sg::config::detail
