// Upstream clusters and their endpoints: requests, errors, connections, health. Per
// endpoint too, so that the endpoint of a cluster that fails is visible, not only that the
// cluster does (HAProxy's per-server series; the labels are configured names only).
#include <string>

#include "metrics/families.h"

namespace sg::metrics::detail {

namespace {

// Requests, errors and retries by cluster.
void cluster_families(Families& fs, const Snap& snap) {
  auto& req =
      fs.family("stealgate_upstream_requests_total", "Requests sent upstream, by cluster.", MetricType::Counter);
  auto& cerr = fs.family("stealgate_upstream_connect_errors_total", "Upstream connect failures.", MetricType::Counter);
  auto& opened = fs.family("stealgate_upstream_connections_opened_total",
                           "Upstream connections opened for requests (a pooled one was not available).",
                           MetricType::Counter);
  auto& tls = fs.family("stealgate_upstream_tls_handshakes_total",
                        "TLS handshakes of upstream connections opened for requests, by whether they "
                        "resumed the session the endpoint issued before.",
                        MetricType::Counter);
  auto& to = fs.family("stealgate_upstream_timeouts_total", "Upstream response timeouts.", MetricType::Counter);
  auto& retry = fs.family("stealgate_upstream_retries_total", "Retried upstream requests.", MetricType::Counter);
  auto& budget = fs.family("stealgate_upstream_retry_budget_exhausted_total", "Retries refused by the retry budget.",
                           MetricType::Counter);
  auto& none = fs.family("stealgate_upstream_no_healthy_endpoint_total", "Requests with no healthy endpoint (503).",
                         MetricType::Counter);
  auto& refused = fs.family("stealgate_upstream_ejections_refused_total",
                            "Endpoints that failed enough to be ejected but stayed in: max_ejection_percent of "
                            "the cluster was out already.",
                            MetricType::Counter);
  auto& dns = fs.family("stealgate_upstream_dns_lookups_total",
                        "Lookups of endpoint names while serving (clusters[].dns_refresh), by result (a failed "
                        "one keeps the address).",
                        MetricType::Counter);
  auto& moves = fs.family("stealgate_upstream_dns_moves_total",
                          "Endpoints moved to a new address because their name resolved elsewhere (each is "
                          "logged).",
                          MetricType::Counter);
  auto& active = fs.family("stealgate_upstream_requests_active", "Requests in flight, by cluster.", MetricType::Gauge);
  auto& spliced = fs.family("stealgate_upstream_spliced_response_bytes_total",
                            "Response body bytes passed from upstream to client by splice, without a copy "
                            "through the proxy's memory (Content-Length bodies of 32 KiB or more, TLS on neither "
                            "side).",
                            MetricType::Counter);
  auto& head = fs.family("stealgate_upstream_response_head_seconds",
                         "Time from sending a request upstream to receiving its response head.", MetricType::Histogram);
  if (!snap) return;
  for (const auto& c : snap->clusters) {
    const upstream::ClusterStats& s = c->stats();
    const Labels lb{{"cluster", c->name()}};
    Families::add(req, lb, static_cast<double>(s.requests.load()));
    Families::add(cerr, lb, static_cast<double>(s.connect_errors.load()));
    Families::add(opened, lb, static_cast<double>(s.connections_opened.load()));
    if (c->tls() != nullptr) {
      for (int resumed = 0; resumed < 2; ++resumed) {
        Families::add(tls, {{"cluster", c->name()}, {"resumed", resumed == 1 ? "true" : "false"}},
                      static_cast<double>(s.tls_handshakes[static_cast<std::size_t>(resumed)].load()));
      }
    }
    Families::add(to, lb, static_cast<double>(s.timeouts.load()));
    Families::add(retry, lb, static_cast<double>(s.retries.load()));
    Families::add(budget, lb, static_cast<double>(s.retries_budget_exhausted.load()));
    Families::add(none, lb, static_cast<double>(s.no_healthy_endpoint.load()));
    Families::add(refused, lb, static_cast<double>(s.ejections_refused.load()));
    if (c->has_names()) {
      Families::add(dns, {{"cluster", c->name()}, {"result", "ok"}}, static_cast<double>(s.dns_lookups_ok.load()));
      Families::add(dns, {{"cluster", c->name()}, {"result", "failed"}},
                    static_cast<double>(s.dns_lookups_failed.load()));
      Families::add(moves, lb, static_cast<double>(s.dns_moves.load()));
    }
    Families::add(active, lb, static_cast<double>(s.active.load()));
    Families::add(spliced, lb, static_cast<double>(s.response_bytes_spliced.load()));
    add_histogram(head, lb, s.response_head_time);
  }
}

// Pooled connections by state, and the ones found closed by the upstream.
void connection_families(Families& fs, const Snap& snap) {
  auto& conns = fs.family("stealgate_upstream_connections", "Upstream connections by state.", MetricType::Gauge);
  auto& stale = fs.family("stealgate_upstream_stale_connections_total",
                          "Pooled connections the upstream had closed: found by the liveness check (check: "
                          "not used), by the worker's pool reaper while idle (reap), or after sending "
                          "(replay: the request was replayed on a new connection).",
                          MetricType::Counter);
  if (!snap) return;
  for (const auto& c : snap->clusters) {
    double idle = 0, active = 0, stale_checked = 0, stale_reaped = 0;
    for (const auto& e : c->endpoints()) {
      idle += static_cast<double>(e->pool().idle());
      stale_checked += static_cast<double>(e->pool().stale());
      stale_reaped += static_cast<double>(e->pool().reaped_stale());
      active += static_cast<double>(e->active.load());
    }
    Families::add(conns, {{"cluster", c->name()}, {"state", "idle"}}, idle);
    Families::add(conns, {{"cluster", c->name()}, {"state", "active"}}, active);
    Families::add(stale, {{"cluster", c->name()}, {"detected", "check"}}, stale_checked);
    Families::add(stale, {{"cluster", c->name()}, {"detected", "reap"}}, stale_reaped);
    Families::add(stale, {{"cluster", c->name()}, {"detected", "replay"}},
                  static_cast<double>(c->stats().stale_replays.load()));
  }
}

// Each endpoint's health, traffic and failures.
void endpoint_families(Families& fs, const Snap& snap) {
  auto& healthy = fs.family("stealgate_upstream_endpoint_healthy",
                            "1 when an endpoint passes health checks and is not ejected.", MetricType::Gauge);
  auto& req = fs.family("stealgate_upstream_endpoint_requests_total",
                        "Requests sent to an endpoint (each attempt; a retry counts at the endpoint it went to).",
                        MetricType::Counter);
  auto& resp = fs.family("stealgate_upstream_endpoint_responses_total",
                         "Final responses from an endpoint, by status class.", MetricType::Counter);
  auto& cerr = fs.family("stealgate_upstream_endpoint_connect_errors_total", "Connect failures to an endpoint.",
                         MetricType::Counter);
  auto& to = fs.family("stealgate_upstream_endpoint_timeouts_total", "Response timeouts of an endpoint.",
                       MetricType::Counter);
  auto& ejections = fs.family("stealgate_upstream_endpoint_ejections_total",
                              "Times outlier detection ejected an endpoint (each one is logged).", MetricType::Counter);
  auto& active = fs.family("stealgate_upstream_endpoint_requests_active", "Requests in flight to an endpoint.",
                           MetricType::Gauge);
  if (!snap) return;
  const int64_t now = upstream::steady_now_ms();
  for (const auto& c : snap->clusters) {
    for (const auto& e : c->endpoints()) {
      const upstream::EndpointStats& s = e->stats();
      const Labels lb{{"cluster", c->name()}, {"endpoint", e->name()}};
      Families::add(healthy, lb, e->available(now) ? 1 : 0);
      Families::add(req, lb, static_cast<double>(s.requests.load()));
      for (std::size_t k = 0; k < s.responses.size(); ++k) {
        Labels by_class = lb;
        by_class.push_back({"code_class", std::to_string(k + 1) + "xx"});
        Families::add(resp, std::move(by_class), static_cast<double>(s.responses[k].load()));
      }
      Families::add(cerr, lb, static_cast<double>(s.connect_errors.load()));
      Families::add(to, lb, static_cast<double>(s.timeouts.load()));
      Families::add(ejections, lb, static_cast<double>(s.ejections.load()));
      Families::add(active, lb, static_cast<double>(e->active.load()));
    }
  }
}

}  // namespace

void upstream_families(Families& fs, const Snap& snap) {
  cluster_families(fs, snap);
  connection_families(fs, snap);
  endpoint_families(fs, snap);
}

}  // namespace sg::metrics::detail
