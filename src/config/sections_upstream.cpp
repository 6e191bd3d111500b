// The upstream side: clusters, their endpoints, health checks, outlier detection and TLS.
#include <sstream>

#include "config/sections.h"
#include "tls/certs.h"

namespace sg::config::detail {

const Table<EndpointSection>& endpoint_table() {
  using F = Fields<EndpointSection>;
  static const Table<EndpointSection> t{
      "clusters[].endpoints[]",
      {F::address("address", &EndpointSection::address,
                  "`host:port`; a name is resolved at load and reload, and again every `dns_refresh`")
           .require(),
       F::number("weight", &EndpointSection::weight, 1, 10000,
                 "share of the traffic relative to the other endpoints")}};
  return t;
}

namespace {

// "200-399" or "204".
Field<HealthCheckSection> expected_status() {
  return Fields<HealthCheckSection>::custom(
      "expected_status", "a status or range of statuses that counts as healthy",
      [](const MapView& m, HealthCheckSection& h) {
        std::string text;
        if (!m.read("expected_status", text) || text.empty()) return;
        int lo = 0, hi = 0;
        char dash = 0;
        std::istringstream is(text);
        const bool range = (is >> lo) && ((is >> dash >> hi && dash == '-') || (hi = lo, true));
        if (range && lo >= 100 && hi <= 599 && lo <= hi) {
          h.expected_status_min = lo;
          h.expected_status_max = hi;
        } else {
          m.ctx().error(m.get("expected_status"), m.path("expected_status"), "expected a status or range like 200-399");
        }
      },
      [](YAML::Emitter& e, const HealthCheckSection& h) {
        e << YAML::Key << "expected_status" << YAML::Value
          << std::to_string(h.expected_status_min) + "-" + std::to_string(h.expected_status_max);
      });
}

}  // namespace

const Table<HealthCheckSection>& health_check_table() {
  using F = Fields<HealthCheckSection>;
  using H = HealthCheckSection;
  static const Table<HealthCheckSection> t{
      "clusters[].health_check",
      {F::flag("enabled", &H::enabled, "the section's presence turns checks on; `false` keeps it written but off")
           .shown("`true`"),
       F::text("path", &H::path, "request path of the check (`GET`)", not_absolute_path),
       F::text("host", &H::host, "`Host` header of the check").shown("the endpoint's address"),
       F::duration("interval", &H::interval, "time between checks of each endpoint"),
       F::duration("timeout", &H::timeout, "a check without a response by then failed"),
       F::number("healthy_threshold", &H::healthy_threshold, 1, 1000,
                 "passed checks in a row that bring an endpoint back"),
       F::number("unhealthy_threshold", &H::unhealthy_threshold, 1, 1000, "failed checks in a row that take it out"),
       expected_status()}};
  return t;
}

const Table<OutlierSection>& outlier_table() {
  using F = Fields<OutlierSection>;
  using O = OutlierSection;
  static const Table<OutlierSection> t{
      "clusters[].outlier_detection",
      {F::number("consecutive_failures", &O::consecutive_failures, 0, 1000,
                 "failed attempts in a row (5xx, connect failure, reset, malformed response, timeout) that "
                 "eject an endpoint; `0` turns detection off. Each ejection is logged and counted "
                 "(`stealgate_upstream_endpoint_ejections_total`)"),
       F::duration("base_ejection_time", &O::base_ejection_time,
                   "first ejection's length; each further ejection of the same endpoint lasts one more of it, "
                   "and each of it the endpoint then serves without one takes one off again"),
       F::duration("max_ejection_time", &O::max_ejection_time, "longest ejection"),
       F::number("max_ejection_percent", &O::max_ejection_percent, 0, 100,
                 "at most this share of a cluster's endpoints is ejected at once (the failures that find "
                 "it reached: `stealgate_upstream_ejections_refused_total`)")}};
  return t;
}

namespace {

void check_client_certificate(const MapView& m, ClusterTls& t) {
  if (t.cert.empty() != t.key.empty()) {
    m.ctx().error(m.node(), m.where(), "a client certificate needs both cert and key");
  } else if (!t.cert.empty()) {
    if (std::string why = tls::check_certificate(t.cert, t.key, nullptr); !why.empty()) {
      m.ctx().error(m.get("cert"), m.path("cert"), why);
    }
  }
}

}  // namespace

const Table<ClusterTls>& cluster_tls_table() {
  using F = Fields<ClusterTls>;
  using T = ClusterTls;
  static const Table<ClusterTls> t{
      "clusters[].tls",
      {F::text("sni", &T::sni, "the name sent and verified (an IP literal sends no SNI and is verified against the "
                               "certificate's IP addresses)")
           .shown("the endpoint's host"),
       F::flag("verify", &T::verify,
               "check the upstream's certificate against `ca` and its name; `false` is for testing only"),
       F::file("ca", &T::ca, "PEM file of the CAs to trust", tls::check_ca_file).shown("the system's CA store"),
       F::file("cert", &T::cert, "client certificate (PEM chain) for upstreams that ask for one"),
       F::file("key", &T::key, "its private key"),
       F::choice("min_version", &T::min_version, kTlsVersions, "`\"1.2\"` or `\"1.3\"`")},
      check_client_certificate};
  return t;
}

namespace {

bool endpoint_from_scalar(Ctx& ctx, const YAML::Node& n, const std::string& path, EndpointSection& ep) {
  std::string why;
  if (parse_address(n.Scalar(), ep.address, why)) return true;
  ctx.error(n, path, "invalid address \"" + n.Scalar() + "\": " + why);
  return false;
}

// Its presence turns checks on; `enabled: false` inside turns them off again.
Field<ClusterSection> health_check() {
  return Fields<ClusterSection>::custom(
             "health_check", "active health checks of each endpoint",
             [](const MapView& m, ClusterSection& c) {
               if (!m.has("health_check")) return;
               c.health_check.enabled = true;
               health_check_table().read(m.ctx(), m.get("health_check"), m.path("health_check"), c.health_check);
             },
             [](YAML::Emitter& e, const ClusterSection& c) {
               if (!c.health_check.enabled) return;
               e << YAML::Key << "health_check" << YAML::Value << YAML::BeginMap;
               health_check_table().emit(e, c.health_check);
               e << YAML::EndMap;
             })
      .shown("off; see `clusters[].health_check`");
}

}  // namespace

const Table<ClusterSection>& cluster_table() {
  using F = Fields<ClusterSection>;
  using C = ClusterSection;
  static const Table<ClusterSection> t{
      "clusters[]",
      {F::text("name", &C::name, "used by `routes[].cluster` and metrics labels").require(),
       F::list("endpoints", &C::endpoints, endpoint_table(), "`host:port`, or `{ address, weight }`",
               "a cluster needs at least one endpoint", endpoint_from_scalar, true)
           .shown("required"),
       F::choice("lb", &C::lb,
                 std::vector<std::pair<std::string, LbPolicy>>{{"round_robin", LbPolicy::kRoundRobin},
                                                               {"random", LbPolicy::kRandom},
                                                               {"least_request", LbPolicy::kLeastRequest},
                                                               {"ring_hash", LbPolicy::kRingHash}},
                 "`round_robin` (smooth weighted), `random`, `least_request` (power of two choices), `ring_hash`"),
       F::text("hash_header", &C::hash_header, "`ring_hash` key: this request header").shown("the client address"),
       F::duration("connect_timeout", &C::connect_timeout, "upstream connect (504 on timeout, 502 when refused)"),
       F::number("max_idle_per_endpoint", &C::max_idle_per_endpoint, 0, 1'000'000,
                 "idle keep-alive connections kept per endpoint: below the requests in flight to "
                 "it, every request past it opens and closes a connection"),
       F::duration("idle_timeout", &C::idle_timeout, "idle upstream connections are closed after this"),
       F::duration("dns_refresh", &C::dns_refresh,
                   "how often endpoint names are resolved again (IP literals never are). An endpoint whose "
                   "address is no longer in the answer moves to the first address in it, with a new pool and "
                   "health state, and a log line; the others keep theirs, and a failed lookup keeps the "
                   "address (logged when the failures start, counted at each). A name that does not resolve "
                   "at the start does not stop it: its endpoint takes no requests until a lookup resolves "
                   "it, looked up every second meanwhile (a reload that brings a new name that does not "
                   "resolve is refused). `0`: resolve at load and reload only, and every name must resolve "
                   "at the start"),
       F::number("max_concurrent_requests", &C::max_concurrent_requests, 0, 100'000'000,
                 "per-cluster admission limit (`0` = none)"),
       health_check(),
       F::section("outlier_detection", &C::outlier, outlier_table(), "passive health: eject failing endpoints"),
       F::optional_section("tls", &C::tls, cluster_tls_table(), "TLS to the endpoints (below)")
           .shown("absent (plain HTTP)")}};
  return t;
}

}  // namespace sg::config::detail
