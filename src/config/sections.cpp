// The top level of stealgate.yaml, and the reference built from every table.
#include "config/sections.h"

namespace sg::config::detail {

namespace {

void check_drain_idle_grace(const MapView& m, Config& c) {
  if (c.drain_idle_grace <= c.drain_timeout) return;
  m.ctx().error(m.get("drain_idle_grace"), m.path("drain_idle_grace"),
                "cannot be longer than drain_timeout (" + format_duration(c.drain_timeout) +
                    "), which closes every connection");
}

}  // namespace

const Table<Config>& config_table() {
  using F = Fields<Config>;
  using C = Config;
  static const Table<Config> t{
      "top level",
      {F::section("runtime", &C::runtime, runtime_table(), "the executor; changes need a restart"),
       F::section("admin", &C::admin, admin_table(), "the admin endpoint"),
       F::list("listeners", &C::listeners, listener_table(), "where clients connect (at least one)").shown("required"),
       F::section("limits", &C::limits, limits_table(), "admission control"),
       F::list("clusters", &C::clusters, cluster_table(), "upstream endpoints and how to reach them"),
       F::list("routes", &C::routes, route_table(), "first match in file order wins"),
       F::section("logging", &C::logging, logging_table(), "event and access logs"),
       F::duration("drain_timeout", &C::drain_timeout,
                   "on SIGTERM: how long in-flight requests may take before connections are closed"),
       F::duration("drain_idle_grace", &C::drain_idle_grace,
                   "on SIGTERM: how long an idle keep-alive connection stays open for one more request, answered "
                   "with `Connection: close` (`0`: closed at once; at most `drain_timeout`)")},
      check_drain_idle_grace};
  return t;
}

std::vector<ReferenceTable> reference_tables() {
  return {config_table().reference(),
          runtime_table().reference(),
          admin_table().reference(),
          listener_table().reference(),
          listener_tls_table().reference(),
          certificate_table().reference(),
          limits_table().reference(),
          cluster_table().reference(),
          endpoint_table().reference(),
          health_check_table().reference(),
          outlier_table().reference(),
          cluster_tls_table().reference(),
          route_table().reference(),
          match_table().reference(),
          rewrite_table().reference(),
          direct_response_table().reference(),
          redirect_table().reference(),
          header_ops_table().reference(),
          retries_table().reference(),
          rate_limit_table().reference(),
          logging_table().reference(),
          access_log_table().reference()};
}

std::string reference_markdown(const ReferenceTable& t) {
  std::string out = "| key | default | meaning |\n|---|---|---|\n";
  // A '|' inside a cell, even in backticks, would end the cell.
  auto cell = [](const std::string& text) {
    std::string escaped;
    for (char c : text) escaped += c == '|' ? std::string("\\|") : std::string(1, c);
    return escaped;
  };
  for (const ReferenceRow& r : t.rows) {
    out += "| `" + r.key + "` | " + cell(r.shown_default) + " | " + cell(r.doc) + " |\n";
  }
  return out;
}

}  // namespace sg::config::detail
