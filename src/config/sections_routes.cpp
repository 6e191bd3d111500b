// Routes: what a request is matched on, and what is done with it.
#include <re2/re2.h>

#include <algorithm>
#include <charconv>

#include "config/loader.h"
#include "config/sections.h"
#include "routing/address_block.h"

namespace sg::config::detail {

namespace {

void read_pairs(Ctx& ctx, const YAML::Node& n, const std::string& path,
                std::vector<std::pair<std::string, std::string>>& out) {
  if (!n.IsDefined() || n.IsNull()) return;
  if (!n.IsMap()) {
    ctx.error(n, path, "expected a mapping of header name to value");
    return;
  }
  for (auto it = n.begin(); it != n.end(); ++it) {
    std::string k, v;
    if (!scalar(ctx, it->first, path, k) || !scalar(ctx, it->second, child(path, k), v)) continue;
    if (std::string why = header_field_refusal(k, v); !why.empty()) {
      ctx.error(it->first, child(path, k), why);
      continue;
    }
    out.emplace_back(k, v);
  }
}

// Header fields as a mapping of name to value.
template <class S, class Get>
Field<S> header_pairs(std::string key, Get get, std::string doc) {
  return Fields<S>::custom(
      key, std::move(doc),
      [=](const MapView& m, S& s) { read_pairs(m.ctx(), m.get(key), m.path(key), std::invoke(get, s)); },
      [=](YAML::Emitter& e, const S& s) {
        const auto& pairs = std::invoke(get, s);
        if (pairs.empty()) return;
        e << YAML::Key << key << YAML::Value << YAML::BeginMap;
        for (const auto& [k, v] : pairs) e << YAML::Key << k << YAML::Value << v;
        e << YAML::EndMap;
      });
}

// `{ name: value, other: ~ }` (null = presence only), or a list of `{ name, value }`.
template <class T>
void read_matchers(Ctx& ctx, const YAML::Node& n, const std::string& path, std::vector<T>& out) {
  if (!n.IsDefined() || n.IsNull()) return;
  if (n.IsMap()) {
    for (auto it = n.begin(); it != n.end(); ++it) {
      T t;
      if (!scalar(ctx, it->first, path, t.name)) continue;
      std::string v;
      if (!it->second.IsNull() && scalar(ctx, it->second, child(path, t.name), v)) t.value = v;
      out.push_back(t);
    }
    return;
  }
  for_each_item(ctx, n, path, [&](const YAML::Node& e, const std::string& p) {
    MapView m(ctx, e, p, {"name", "value"});
    T t;
    m.read("name", t.name);
    if (t.name.empty()) ctx.error(e, p, "missing required key \"name\"");
    std::string v;
    if (m.has("value") && m.read("value", v)) t.value = v;
    out.push_back(t);
  });
}

template <class Get>
Field<RouteMatchSection> matchers(std::string key, Get get, std::string doc) {
  return Fields<RouteMatchSection>::custom(
             key, std::move(doc),
             [=](const MapView& m, RouteMatchSection& s) {
               read_matchers(m.ctx(), m.get(key), m.path(key), std::invoke(get, s));
             },
             [=](YAML::Emitter& e, const RouteMatchSection& s) {
               const auto& list = std::invoke(get, s);
               if (list.empty()) return;
               e << YAML::Key << key << YAML::Value << YAML::BeginSeq;
               for (const auto& mt : list) {
                 e << YAML::BeginMap << YAML::Key << "name" << YAML::Value << mt.name;
                 if (mt.value) e << YAML::Key << "value" << YAML::Value << *mt.value;
                 e << YAML::EndMap;
               }
               e << YAML::EndSeq;
             })
      .shown("—");
}

// Requests are matched on the normalized path (http/path.h): a matcher that is not normal
// itself could never match (and would look like an access rule that holds).
std::string normal_path(const std::string& v) {
  if (v.front() != '/') return "must start with /";
  std::string normal = v;
  const http::PathResult pr = http::normalize_path(normal, http::PathOptions{});
  if (pr.error == http::PathError::kNone && !pr.changed) return "";
  return "\"" + v + "\" is not a normalized path and would never match (requests are matched after normalization" +
         (pr.error == http::PathError::kNone ? "; write \"" + normal + "\")" : ")");
}

std::string valid_regex(const std::string& v) {
  re2::RE2::Options opt;
  opt.set_log_errors(false);
  const re2::RE2 re(v, opt);
  return re.ok() ? "" : "invalid regular expression (RE2 syntax): " + re.error();
}

std::string host_pattern(const std::string& h) {
  const bool wildcard = h.rfind("*.", 0) == 0;
  if (h.find('*', wildcard ? 1 : 0) != std::string::npos || h.find('/') != std::string::npos) {
    return "host must be exact or *.suffix";
  }
  return "";
}

void check_match(const MapView& m, RouteMatchSection& r) {
  const int paths = !r.path_exact.empty() + !r.path_prefix.empty() + !r.path_regex.empty();
  if (paths > 1) m.ctx().error(m.node(), m.where(), "use only one of path, path_prefix, path_regex");
  // An allow rule written with an empty list would let every client in.
  if (m.has("source") && r.sources.empty() && m.get("source").IsSequence()) {
    m.ctx().error(m.get("source"), m.path("source"),
                  "an empty list would match every client; leave source out to mean any client");
  }
}

}  // namespace

const Table<RouteMatchSection>& match_table() {
  using F = Fields<RouteMatchSection>;
  using M = RouteMatchSection;
  static const Table<RouteMatchSection> t{
      "routes[].match",
      {F::text("host", &M::host, "exact (`api.example.com`) or wildcard (`*.example.com`); the port is ignored",
               host_pattern)
           .shown("any"),
       F::text("path", &M::path_exact, "this exact path (one of `path`, `path_prefix`, `path_regex`)", normal_path)
           .shown("any"),
       F::text("path_prefix", &M::path_prefix, "paths starting with this", normal_path).shown("any"),
       F::text("path_regex", &M::path_regex,
               "regular expression over the whole path, in RE2's syntax (Envoy's `safe_regex`, Go's `regexp`: "
               "no backreferences or lookaround), matched in time linear in the path's length",
               valid_regex)
           .shown("any"),
       F::flag("case_sensitive", &M::case_sensitive,
               "`false`: `path`, `path_prefix` and `path_regex` ignore ASCII case (`/Admin` matches "
               "`/admin`); set it on access rules in front of an upstream that treats paths that way"),
       F::strings("methods", &M::methods, "e.g. `[GET, POST]`", nullptr, false).shown("any"),
       matchers("headers", &M::headers, "`{ X-Env: prod, X-Debug: ~ }` (`~` = must be present)"),
       matchers("query", &M::query, "query parameters, same form"),
       F::strings("listener", &M::listeners, "listener name(s) this route applies to", nullptr, false).shown("every"),
       F::strings("source", &M::sources,
                  "client addresses this route applies to: IPs and blocks (`[10.0.0.0/8, 2001:db8::/32, "
                  "192.0.2.7]`), matched against the client's address: the TCP peer's, or the one the listener's "
                  "`proxy_protocol` or `trusted_proxies` names (an IPv4 client of a dual-stack listener matches IPv4 "
                  "blocks)",
                  address_block_refusal, false)
           .shown("any")},
      check_match};
  return t;
}

const Table<RouteSection>& rewrite_table() {
  using F = Fields<RouteSection>;
  using R = RouteSection;
  static const Table<RouteSection> t{
      "routes[].rewrite",
      {F::text("strip_prefix", &R::strip_prefix, "removed from the start of the path before it goes upstream")
           .shown("—"),
       F::text("path", &R::rewrite_path, "replaces the whole path", not_absolute_path).shown("—"),
       F::text("host", &R::rewrite_host, "replaces the `Host` sent upstream").shown("—")}};
  return t;
}

const Table<DirectResponseSection>& direct_response_table() {
  using F = Fields<DirectResponseSection>;
  using D = DirectResponseSection;
  static const Table<DirectResponseSection> t{
      "routes[].direct_response",
      {F::number("status", &D::status, 100, 599, "the response's status"),
       F::text("body", &D::body, "the response's body").shown("empty"),
       header_pairs<D>("headers", &D::headers, "`{ name: value }` fields of the response").shown("—")}};
  return t;
}

const Table<RedirectSection>& redirect_table() {
  using F = Fields<RedirectSection>;
  static const Table<RedirectSection> t{
      "routes[].redirect",
      {F::number("status", &RedirectSection::status, 300, 399, "301, 302, 303, 307 or 308"),
       F::text("location", &RedirectSection::location, "the `Location` sent").require()},
      [](const MapView& m, RedirectSection& r) {
        if (r.status != 301 && r.status != 302 && r.status != 303 && r.status != 307 && r.status != 308) {
          m.ctx().error(m.get("status"), m.path("status"), "redirect status must be 301, 302, 303, 307 or 308");
        }
      }};
  return t;
}

const Table<HeaderOps>& header_ops_table() {
  using F = Fields<HeaderOps>;
  static const Table<HeaderOps> t{
      "routes[].request_headers, routes[].response_headers",
      {header_pairs<HeaderOps>("add", &HeaderOps::add, "`{ name: value }`: added (after those already there)")
           .shown("—"),
       header_pairs<HeaderOps>("set", &HeaderOps::set, "`{ name: value }`: replace any field of that name").shown("—"),
       F::strings("remove", &HeaderOps::remove, "`[name]`: removed; remove runs first, then set, then add",
                  [](std::string& name) { return header_name_refusal(name); }, false)
           .shown("—")}};
  return t;
}

const Table<RetrySection>& retries_table() {
  using F = Fields<RetrySection>;
  using R = RetrySection;
  static const Table<RetrySection> t{
      "routes[].retries",
      {F::number("attempts", &R::attempts, 0, 10,
                 "retries of a request an upstream has seen (`reset`, `5xx`, `gateway_error`, `timeout`); only "
                 "idempotent requests are retried after anything was sent, and only those without a body or "
                 "whose body is held whole (it came with the head, or `request_buffering` read it)"),
       F::choices("on", &R::on,
                  std::vector<std::pair<std::string, RetryOn>>{{"connect_failure", RetryOn::kConnectFailure},
                                                               {"reset", RetryOn::kReset},
                                                               {"5xx", RetryOn::k5xx},
                                                               {"gateway_error", RetryOn::kGatewayError},
                                                               {"timeout", RetryOn::kTimeout}},
                  "conditions: `connect_failure`, `reset`, `5xx`, `gateway_error`, `timeout`"),
       F::number("budget_percent", &R::budget_percent, 0, 100, "retries in flight, as a share of the active requests"),
       F::number("min_retry_concurrency", &R::min_retry_concurrency, 0, 100000,
                 "retries always allowed in flight, whatever the share")}};
  return t;
}

namespace {

// A protocol name is a token, like a field name (RFC 9110 §7.8); kept lower-case.
std::string protocol_name(std::string& u) {
  if (!is_field_name(u)) return "\"" + u + "\" is not a protocol name";
  for (char& c : u) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
  return "";
}

void check_one_action(const MapView& m, RouteSection& r) {
  const int actions = !r.cluster.empty() + r.direct_response.has_value() + r.redirect.has_value();
  if (actions == 1) return;
  m.ctx().error(m.node(), m.where(),
                actions == 0 ? "a route needs one of cluster, direct_response or redirect"
                             : "a route takes only one of cluster, direct_response or redirect");
}

bool any_rewrite(const RouteSection& r) {
  return !r.strip_prefix.empty() || !r.rewrite_path.empty() || !r.rewrite_host.empty();
}

bool any_ops(const HeaderOps& o) { return !o.add.empty() || !o.set.empty() || !o.remove.empty(); }

// "100/s": whole requests per second, minute or hour.
std::string parse_rate(const std::string& v, RateLimitSection& r) {
  const std::size_t slash = v.find('/');
  const std::string unit = slash == std::string::npos ? "" : v.substr(slash + 1);
  const Duration per = unit == "s" ? Duration{1000} : unit == "m" ? Duration{60'000} : unit == "h" ? Duration{3'600'000}
                                                                                      : Duration{0};
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + (slash == std::string::npos ? 0 : slash), n);
  if (per.count() == 0 || ec != std::errc() || end != v.data() + slash || n == 0 || n > 1'000'000'000) {
    return "\"" + v + "\": expected requests per second, minute or hour (e.g. 100/s, 6000/m, 50000/h)";
  }
  r.count = n;
  r.per = per;
  return "";
}

std::string rate_limit_key(const std::string& k) {
  if (k == "client_ip" || k == "route") return "";
  if (k.rfind("header:", 0) == 0 && is_field_name(std::string_view(k).substr(7))) return "";
  return "\"" + k + "\": expected client_ip, route or header:NAME";
}

void check_rate_limit(const MapView& m, RateLimitSection& r) {
  if (r.rate.empty()) return;  // reported as missing
  if (std::string why = parse_rate(r.rate, r); !why.empty()) {
    m.ctx().error(m.get("rate"), m.path("rate"), why);
    return;
  }
  // One second's worth by default (at least one): a client that sends a few requests at
  // once is not refused at a steady rate it keeps to.
  if (!m.has("burst")) r.burst = std::max<uint64_t>(1, (r.count * 1000 + r.per.count() - 1) / r.per.count());
}

}  // namespace

std::string address_block_refusal(std::string& v) {
  routing::AddressBlock b;
  return routing::parse_address_block(v, b);
}

const Table<RateLimitSection>& rate_limit_table() {
  using F = Fields<RateLimitSection>;
  using L = RateLimitSection;
  static const Table<RateLimitSection> t{
      "routes[].rate_limit",
      {F::text("rate", &L::rate, "requests per key: `100/s`, `6000/m`, `50000/h`").require(),
       F::number("burst", &L::burst, 0, 1'000'000'000,
                 "requests beyond the rate that may come at once (nginx's `burst` with `nodelay`)")
           .shown("one second's worth of `rate` (at least 1)"),
       F::text("key", &L::key,
               "what a limit counts by: `client_ip` (the client's address; IPv6 clients by their /64), `route` (one "
               "limit for all), or `header:NAME` (e.g. `header:X-Api-Key`; a request without it counts by its "
               "client_ip)",
               rate_limit_key),
       F::number("max_keys", &L::max_keys, 1, 100'000'000,
                 "keys tracked at once (about 100 bytes each); beyond it the key closest to its full allowance "
                 "is forgotten")},
      check_rate_limit};
  return t;
}

const Table<RouteSection>& route_table() {
  using F = Fields<RouteSection>;
  using R = RouteSection;
  static const Table<RouteSection> t{
      "routes[]",
      {F::text("name", &R::name, "label in metrics and access logs").shown("`route<N>`"),
       F::section("match", &R::match, match_table(), "what the request must look like (all given conditions)")
           .shown("any request"),
       F::text("cluster", &R::cluster, "forward to this cluster; or:").shown("—"),
       F::optional_section("direct_response", &R::direct_response, direct_response_table(),
                           "answer with this response; or:")
           .shown("—"),
       F::optional_section("redirect", &R::redirect, redirect_table(), "answer with a redirect").shown("—"),
       F::custom(
             "rewrite", "`{ strip_prefix, path, host }`: changes made before the request goes upstream",
             [](const MapView& m, R& r) { rewrite_table().read(m.ctx(), m.get("rewrite"), m.path("rewrite"), r); },
             [](YAML::Emitter& e, const R& r) {
               if (!any_rewrite(r)) return;
               e << YAML::Key << "rewrite" << YAML::Value << YAML::BeginMap;
               rewrite_table().emit(e, r);
               e << YAML::EndMap;
             })
           .shown("—"),
       F::section("request_headers", &R::request_headers, header_ops_table(),
                  "`{ add: {k: v}, set: {k: v}, remove: [k] }` on the request sent upstream", any_ops)
           .shown("—"),
       F::section("response_headers", &R::response_headers, header_ops_table(),
                  "the same on the response sent to the client", any_ops)
           .shown("—"),
       F::duration("timeout", &R::timeout, "upstream response timeout (head, and each body read): 504"),
       F::section("retries", &R::retries, retries_table(), "when and how often a request is tried again"),
       F::number("max_concurrent_requests", &R::max_concurrent_requests, 0, 100'000'000,
                 "per-route admission limit (`0` = none)"),
       F::size("request_buffering", &R::request_buffering,
               "request body bytes read before the request is admitted and an upstream is picked: a body that "
               "completes within them goes upstream whole, once it has all arrived, so a client that sends "
               "slowly holds no admission permit and no upstream connection meanwhile (nginx buffers bodies "
               "by default: thread-per-connection upstreams such as gunicorn's sync workers need this); a "
               "larger body streams on after them. stealgate answers `Expect: 100-continue` itself. `0`: "
               "bodies stream to the upstream as they arrive"),
       F::optional_section("rate_limit", &R::rate_limit, rate_limit_table(),
                           "requests per client (or per key) over time; beyond it `429` with `Retry-After`")
           .shown("—"),
       F::strings("upgrades", &R::upgrades,
                  "protocols a client may switch to through this route (`Upgrade:`); `[]` allows none",
                  protocol_name)},
      check_one_action};
  return t;
}

}  // namespace sg::config::detail
