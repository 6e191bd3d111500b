#include "config/loader.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <tuple>
#include <regex>
#include <set>
#include <sstream>

#include "config/yaml_walk.h"
#include "tls/certs.h"

namespace sg::config {

using detail::Ctx;
using detail::MapView;
using detail::child;
using detail::index;

std::string Address::text() const {
  return host.find(':') != std::string::npos ? "[" + host + "]:" + std::to_string(port)
                                             : host + ":" + std::to_string(port);
}

const ClusterSection* Config::find_cluster(const std::string& name) const {
  for (const auto& c : clusters) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::string ConfigError::to_string() const {
  std::string s = file;
  if (line > 0) s += ":" + std::to_string(line) + ":" + std::to_string(column);
  s += ": ";
  if (!path.empty()) s += path + ": ";
  s += message;
  return s;
}

std::string LoadResult::error_text() const {
  std::string out;
  for (const auto& e : errors) out += e.to_string() + "\n";
  return out;
}

bool is_field_name(std::string_view name) {
  static constexpr std::string_view kTchar = "!#$%&'*+-.^_`|~";
  if (name.empty()) return false;
  for (char c : name) {
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && kTchar.find(c) == std::string_view::npos) return false;
  }
  return true;
}

std::string header_field_refusal(std::string_view name, std::string_view value) {
  for (char c : value) {
    // field-value is VCHAR / obs-text / SP / HTAB (RFC 9110 §5.5): a control character would
    // make every message carrying it malformed (and CR/LF would inject fields).
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) return "header value contains a control character (CR, LF, NUL, ...)";
  }
  return header_name_refusal(name);
}

std::string header_name_refusal(std::string_view name) {
  if (!is_field_name(name)) return "\"" + std::string(name) + "\" is not a header name";
  // Framing and connection fields are stealgate's to write: a configured one would contradict
  // the framing it produces (two lengths, a smuggling recipe) or the connection's handling.
  for (std::string_view own : {"content-length", "transfer-encoding", "connection", "upgrade", "expect", "te", "trailer",
                               "keep-alive", "proxy-connection", "host"}) {
    if (name.size() == own.size() &&
        std::equal(name.begin(), name.end(), own.begin(), [](char a, char b) { return (a | 0x20) == b; })) {
      return "\"" + std::string(name) + "\" is set by stealgate itself" +
             (own == "host" ? std::string(" (use rewrite.host)") : std::string());
    }
  }
  return {};
}

namespace {

const YAML::Node kUndef(YAML::NodeType::Undefined);

// Iterates a list node (absent = empty), reporting a non-list.
template <class F>
void for_each_item(Ctx& ctx, const YAML::Node& n, const std::string& path, F&& f) {
  if (!n.IsDefined() || n.IsNull()) return;
  if (!n.IsSequence()) {
    ctx.error(n, path, "expected a list");
    return;
  }
  for (std::size_t i = 0; i < n.size(); ++i) {
    // "- " with nothing after it (or only a comment) would otherwise be an entry of
    // defaults that skipped every check of its section. Reported where the list starts
    // (yaml-cpp places an empty item at the token after it), with the item's index.
    if (n[i].IsNull()) {
      ctx.error(n, index(path, i), "an empty list item (a mapping is expected)");
      continue;
    }
    f(n[i], index(path, i));
  }
}

void parse_admin(Ctx& ctx, const YAML::Node& n, AdminSection& a) {
  MapView m(ctx, n, "admin", {"enabled", "address"});
  m.read("enabled", a.enabled);
  m.read_address("address", a.address);
}

// A key whose value is one of a fixed set of words.
template <class T>
void read_choice(const MapView& m, std::string_view key, T& out,
                 const std::vector<std::pair<std::string_view, T>>& choices) {
  std::string v;
  if (!m.read(key, v) || !m.has(key)) return;
  std::string expected;
  for (const auto& [word, value] : choices) {
    if (v == word) {
      out = value;
      return;
    }
    expected += (expected.empty() ? "" : " | ") + std::string(word);
  }
  m.ctx().error(m.get(key), m.path(key), "expected " + expected + ", got \"" + v + "\"");
}

void parse_runtime(Ctx& ctx, const YAML::Node& n, RuntimeSection& r) {
  MapView m(ctx, n, "runtime",
            {"worker_threads", "io_driver", "global_queue_interval", "adaptive_global_queue_interval",
             "event_interval", "coop_budget", "max_lifo_polls_per_tick", "max_blocking_threads",
             "task_diagnostics", "long_poll_threshold"});
  YAML::Node wt = m.get("worker_threads");
  if (wt.IsDefined() && !(wt.IsScalar() && wt.Scalar() == "auto")) m.read_num("worker_threads", r.worker_threads, 1, 1024);
  read_choice(m, "io_driver", r.io_driver,
              {{"auto", IoDriver::kAuto}, {"io_uring", IoDriver::kIoUring}, {"epoll", IoDriver::kEpoll}});
  m.read_num("global_queue_interval", r.global_queue_interval, 2, 1u << 20);
  m.read("adaptive_global_queue_interval", r.adaptive_global_queue_interval);
  m.read_num("event_interval", r.event_interval, 1, 1u << 20);
  m.read_num("coop_budget", r.coop_budget, 1, 1u << 20);
  m.read_num("max_lifo_polls_per_tick", r.max_lifo_polls_per_tick, 0, 1u << 20);
  m.read_num("max_blocking_threads", r.max_blocking_threads, 1, 100000);
  m.read("task_diagnostics", r.task_diagnostics);
  if (m.read_duration("long_poll_threshold", r.long_poll_threshold) && r.long_poll_threshold.count() < 1) {
    m.ctx().error(m.get("long_poll_threshold"), m.path("long_poll_threshold"), "must be at least 1ms");
  }
}


// A file named in the configuration: relative names are relative to the file's directory.
std::string config_relative(const Ctx& ctx, const std::string& file) {
  if (file.empty() || file.front() == '/') return file;
  const std::size_t slash = ctx.file.rfind('/');
  return slash == std::string::npos ? file : ctx.file.substr(0, slash + 1) + file;
}

void read_min_version(const MapView& m, TlsVersion& out) {
  std::string v;
  if (!m.read("min_version", v) || !m.has("min_version")) return;
  if (v == "1.2") out = TlsVersion::k12;
  else if (v == "1.3") out = TlsVersion::k13;
  else m.ctx().error(m.get("min_version"), m.path("min_version"), "expected \"1.2\" or \"1.3\", got \"" + v + "\"");
}

void parse_tls_certificate(Ctx& ctx, const YAML::Node& n, const std::string& path, TlsCertificate& c) {
  MapView m(ctx, n, path, {"cert", "key"});
  if (!n.IsMap()) return;
  for (std::string_view k : {"cert", "key"}) {
    if (!m.has(k)) ctx.error(n, path, "missing required key \"" + std::string(k) + "\"");
  }
  m.read("cert", c.cert);
  m.read("key", c.key);
  if (c.cert.empty() || c.key.empty()) return;
  c.cert = config_relative(ctx, c.cert);
  c.key = config_relative(ctx, c.key);
  if (std::string why = tls::check_certificate(c.cert, c.key, nullptr); !why.empty()) ctx.error(n, path, why);
}

void parse_listener_tls(Ctx& ctx, const YAML::Node& n, const std::string& path, ListenerTls& t) {
  MapView m(ctx, n, path,
            {"certificates", "min_version", "ciphers", "ciphersuites", "alpn", "session_tickets",
             "ticket_key_rotation", "session_cache_size", "session_timeout", "handshake_timeout", "client_auth",
             "client_ca", "client_subject_header"});
  if (!n.IsMap()) return;
  YAML::Node certs = m.get("certificates");
  if (!certs.IsDefined() || (certs.IsSequence() && certs.size() == 0)) {
    ctx.error(certs.IsDefined() ? certs : n, m.path("certificates"), "a TLS listener needs at least one certificate");
  }
  for_each_item(ctx, certs, m.path("certificates"), [&](const YAML::Node& c, const std::string& p) {
    t.certificates.emplace_back();
    parse_tls_certificate(ctx, c, p, t.certificates.back());
  });
  read_min_version(m, t.min_version);
  for (auto [key, tls13] : {std::pair{"ciphers", false}, std::pair{"ciphersuites", true}}) {
    std::string& list = tls13 ? t.ciphersuites : t.ciphers;
    if (!m.read(key, list) || list.empty()) continue;
    if (std::string why = tls::check_ciphers(list, tls13); !why.empty()) ctx.error(m.get(key), m.path(key), why);
  }
  if (m.has("alpn")) {
    t.alpn.clear();
    m.read_strings("alpn", t.alpn);
    for (const std::string& p : t.alpn) {
      if (p != "http/1.1") {
        ctx.error(m.get("alpn"), m.path("alpn"), "unsupported protocol \"" + p + "\" (stealgate speaks http/1.1)");
      }
    }
  }
  m.read("session_tickets", t.session_tickets);
  if (m.read_duration("ticket_key_rotation", t.ticket_key_rotation) && t.ticket_key_rotation.count() < 1000) {
    ctx.error(m.get("ticket_key_rotation"), m.path("ticket_key_rotation"), "must be at least 1s");
  }
  m.read_num("session_cache_size", t.session_cache_size, 0, 10'000'000);
  if (m.read_duration("session_timeout", t.session_timeout) && t.session_timeout.count() < 1000) {
    ctx.error(m.get("session_timeout"), m.path("session_timeout"), "must be at least 1s");
  }
  m.read_duration("handshake_timeout", t.handshake_timeout);
  read_choice(m, "client_auth", t.client_auth,
              {{"off", ClientAuth::kOff}, {"optional", ClientAuth::kOptional}, {"required", ClientAuth::kRequired}});
  if (m.read("client_ca", t.client_ca) && !t.client_ca.empty()) {
    t.client_ca = config_relative(ctx, t.client_ca);
    if (std::string why = tls::check_ca_file(t.client_ca); !why.empty()) {
      ctx.error(m.get("client_ca"), m.path("client_ca"), why);
    }
  }
  if (t.client_auth != ClientAuth::kOff && t.client_ca.empty()) {
    ctx.error(m.has("client_auth") ? m.get("client_auth") : n, m.path("client_auth"),
              "client certificates need client_ca (the CA file they must chain to)");
  }
  if (m.read("client_subject_header", t.client_subject_header)) {
    if (std::string why = header_name_refusal(t.client_subject_header); !why.empty()) {
      ctx.error(m.get("client_subject_header"), m.path("client_subject_header"), why);
    }
  }
}

void parse_listener(Ctx& ctx, const YAML::Node& n, const std::string& path, ListenerSection& l) {
  MapView m(ctx, n, path,
            {"name", "address", "backlog", "reuse_port", "max_connections", "on_max_connections",
             "header_timeout", "idle_timeout", "body_timeout", "send_timeout", "max_target_bytes",
             "max_header_bytes", "max_headers", "max_body_bytes", "path_normalization", "escaped_slashes",
             "backslashes", "tls"});
  if (!n.IsMap()) return;
  m.read("name", l.name);
  if (!m.has("address")) ctx.error(n, path, "missing required key \"address\"");
  m.read_address("address", l.address);
  m.read_num("backlog", l.backlog, 1, 65535);
  m.read("reuse_port", l.reuse_port);
  m.read_num("max_connections", l.max_connections, 1, 10'000'000);
  std::string over;
  if (m.read("on_max_connections", over) && !over.empty()) {
    if (over == "reject") l.on_max_connections = OverflowAction::kReject503;
    else if (over == "backlog") l.on_max_connections = OverflowAction::kBacklog;
    else ctx.error(m.get("on_max_connections"), m.path("on_max_connections"),
                   "expected reject or backlog, got \"" + over + "\"");
  }
  m.read_duration("header_timeout", l.header_timeout);
  m.read_duration("idle_timeout", l.idle_timeout);
  m.read_duration("body_timeout", l.body_timeout);
  m.read_duration("send_timeout", l.send_timeout);
  uint64_t v = l.max_target_bytes;
  if (m.read_size("max_target_bytes", v)) l.max_target_bytes = v;
  v = l.max_header_bytes;
  if (m.read_size("max_header_bytes", v)) l.max_header_bytes = v;
  m.read_num("max_headers", l.max_headers, 1, 10000);
  m.read_size("max_body_bytes", l.max_body_bytes);
  read_choice(m, "path_normalization", l.path.policy,
              {{"normalize", http::PathPolicy::kNormalize}, {"reject", http::PathPolicy::kReject},
               {"off", http::PathPolicy::kOff}});
  const std::vector<std::pair<std::string_view, http::SlashPolicy>> slash = {
      {"keep", http::SlashPolicy::kKeep}, {"reject", http::SlashPolicy::kReject}, {"decode", http::SlashPolicy::kDecode}};
  read_choice(m, "escaped_slashes", l.path.escaped_slashes, slash);
  read_choice(m, "backslashes", l.path.backslashes, slash);
  if (m.has("tls")) {
    l.tls.emplace();
    parse_listener_tls(ctx, m.get("tls"), m.path("tls"), *l.tls);
  }
}

void parse_limits(Ctx& ctx, const YAML::Node& n, LimitsSection& l) {
  MapView m(ctx, n, "limits",
            {"max_concurrent_requests", "max_queued_requests", "queue_timeout", "retry_after", "lifo_after",
             "shed_target", "shed_interval"});
  m.read_num("max_concurrent_requests", l.max_concurrent_requests, 0, 100'000'000);
  m.read_num("max_queued_requests", l.max_queued_requests, 0, 100'000'000);
  m.read_duration("queue_timeout", l.queue_timeout);
  Duration ra{l.retry_after_seconds * 1000};
  if (m.read_duration("retry_after", ra)) l.retry_after_seconds = static_cast<uint32_t>((ra.count() + 999) / 1000);
  m.read_duration("lifo_after", l.lifo_after);
  m.read_duration("shed_target", l.shed_target);
  m.read_duration("shed_interval", l.shed_interval);
}

bool parse_lb(const std::string& s, LbPolicy& out) {
  if (s == "round_robin") out = LbPolicy::kRoundRobin;
  else if (s == "random") out = LbPolicy::kRandom;
  else if (s == "least_request") out = LbPolicy::kLeastRequest;
  else if (s == "ring_hash") out = LbPolicy::kRingHash;
  else return false;
  return true;
}

void parse_cluster_tls(Ctx& ctx, const YAML::Node& n, const std::string& path, ClusterTls& t) {
  MapView m(ctx, n, path, {"sni", "verify", "ca", "cert", "key", "min_version"});
  if (!n.IsMap()) return;
  m.read("sni", t.sni);
  m.read("verify", t.verify);
  read_min_version(m, t.min_version);
  if (m.read("ca", t.ca) && !t.ca.empty()) {
    t.ca = config_relative(ctx, t.ca);
    if (std::string why = tls::check_ca_file(t.ca); !why.empty()) ctx.error(m.get("ca"), m.path("ca"), why);
  }
  m.read("cert", t.cert);
  m.read("key", t.key);
  if (t.cert.empty() != t.key.empty()) {
    ctx.error(n, path, "a client certificate needs both cert and key");
  } else if (!t.cert.empty()) {
    t.cert = config_relative(ctx, t.cert);
    t.key = config_relative(ctx, t.key);
    if (std::string why = tls::check_certificate(t.cert, t.key, nullptr); !why.empty()) ctx.error(m.get("cert"), m.path("cert"), why);
  }
}

void parse_cluster(Ctx& ctx, const YAML::Node& n, const std::string& path, ClusterSection& c) {
  MapView m(ctx, n, path,
            {"name", "endpoints", "lb", "hash_header", "connect_timeout", "max_idle_per_endpoint", "idle_timeout",
             "max_concurrent_requests", "health_check", "outlier_detection", "tls"});
  if (!n.IsMap()) return;
  m.read("name", c.name);
  if (c.name.empty()) ctx.error(n, path, "missing required key \"name\"");
  std::string lb;
  if (m.read("lb", lb) && !lb.empty() && !parse_lb(lb, c.lb)) {
    ctx.error(m.get("lb"), m.path("lb"),
              "unknown policy \"" + lb + "\"" +
                  detail::did_you_mean(lb, {"round_robin", "random", "least_request", "ring_hash"}) +
                  "; expected round_robin, random, least_request or ring_hash");
  }
  m.read("hash_header", c.hash_header);
  m.read_duration("connect_timeout", c.connect_timeout);
  m.read_num("max_idle_per_endpoint", c.max_idle_per_endpoint, 0, 1'000'000);
  m.read_duration("idle_timeout", c.idle_timeout);
  m.read_num("max_concurrent_requests", c.max_concurrent_requests, 0, 100'000'000);
  YAML::Node eps = m.get("endpoints");
  if (!eps.IsDefined() || (eps.IsSequence() && eps.size() == 0)) {
    ctx.error(eps.IsDefined() ? eps : n, m.path("endpoints"), "a cluster needs at least one endpoint");
  }
  for_each_item(ctx, eps, m.path("endpoints"), [&](const YAML::Node& e, const std::string& p) {
    EndpointSection ep;
    std::string why;
    if (e.IsScalar()) {
      if (!detail::parse_address(e.Scalar(), ep.address, why)) {
        ctx.error(e, p, "invalid address \"" + e.Scalar() + "\": " + why);
        return;
      }
    } else {
      MapView em(ctx, e, p, {"address", "weight"});
      if (!e.IsMap()) return;
      if (!em.has("address")) ctx.error(e, p, "missing required key \"address\"");
      em.read_address("address", ep.address);
      em.read_num("weight", ep.weight, 1, 10000);
    }
    c.endpoints.push_back(ep);
  });
  if (m.has("tls")) {
    c.tls.emplace();
    parse_cluster_tls(ctx, m.get("tls"), m.path("tls"), *c.tls);
  }
  YAML::Node hc = m.get("health_check");
  if (hc.IsDefined()) {
    c.health_check.enabled = true;
    MapView h(ctx, hc, m.path("health_check"),
              {"enabled", "path", "host", "interval", "timeout", "healthy_threshold", "unhealthy_threshold",
               "expected_status"});
    h.read("enabled", c.health_check.enabled);
    h.read("path", c.health_check.path);
    h.read("host", c.health_check.host);
    h.read_duration("interval", c.health_check.interval);
    h.read_duration("timeout", c.health_check.timeout);
    h.read_num("healthy_threshold", c.health_check.healthy_threshold, 1, 1000);
    h.read_num("unhealthy_threshold", c.health_check.unhealthy_threshold, 1, 1000);
    std::string es;
    if (h.read("expected_status", es) && !es.empty()) {
      int lo = 0, hi = 0;
      char dash = 0;
      std::istringstream is(es);
      if ((is >> lo) && ((is >> dash >> hi && dash == '-') || (hi = lo, true)) && lo >= 100 && hi <= 599 && lo <= hi) {
        c.health_check.expected_status_min = lo;
        c.health_check.expected_status_max = hi;
      } else {
        ctx.error(h.get("expected_status"), h.path("expected_status"), "expected a status or range like 200-399");
      }
    }
    if (!c.health_check.path.empty() && c.health_check.path.front() != '/') {
      ctx.error(h.get("path"), h.path("path"), "must start with /");
    }
  }
  YAML::Node od = m.get("outlier_detection");
  if (od.IsDefined()) {
    MapView o(ctx, od, m.path("outlier_detection"),
              {"consecutive_failures", "base_ejection_time", "max_ejection_time", "max_ejection_percent"});
    o.read_num("consecutive_failures", c.outlier.consecutive_failures, 0, 1000);
    o.read_duration("base_ejection_time", c.outlier.base_ejection_time);
    o.read_duration("max_ejection_time", c.outlier.max_ejection_time);
    o.read_num("max_ejection_percent", c.outlier.max_ejection_percent, 0, 100);
  }
}

void parse_pairs(Ctx& ctx, const YAML::Node& n, const std::string& path,
                 std::vector<std::pair<std::string, std::string>>& out) {
  if (!n.IsDefined() || n.IsNull()) return;
  if (!n.IsMap()) {
    ctx.error(n, path, "expected a mapping of header name to value");
    return;
  }
  for (auto it = n.begin(); it != n.end(); ++it) {
    std::string k, v;
    if (detail::scalar(ctx, it->first, path, k) && detail::scalar(ctx, it->second, child(path, k), v)) {
      if (std::string why = header_field_refusal(k, v); !why.empty()) {
        ctx.error(it->first, child(path, k), why);
        continue;
      }
      out.emplace_back(k, v);
    }
  }
}

void parse_header_ops(Ctx& ctx, const YAML::Node& n, const std::string& path, HeaderOps& ops) {
  MapView m(ctx, n, path, {"add", "set", "remove"});
  parse_pairs(ctx, m.get("add"), m.path("add"), ops.add);
  parse_pairs(ctx, m.get("set"), m.path("set"), ops.set);
  m.read_strings("remove", ops.remove);
  for (const auto& name : ops.remove) {
    if (std::string why = header_name_refusal(name); !why.empty()) ctx.error(m.get("remove"), m.path("remove"), why);
  }
}

template <class T>
void parse_name_value_matchers(Ctx& ctx, const YAML::Node& n, const std::string& path, std::vector<T>& out) {
  if (!n.IsDefined() || n.IsNull()) return;
  if (n.IsMap()) {  // { name: value, other: ~ }  (null value = presence only)
    for (auto it = n.begin(); it != n.end(); ++it) {
      T t;
      if (!detail::scalar(ctx, it->first, path, t.name)) continue;
      if (!it->second.IsNull()) {
        std::string v;
        if (detail::scalar(ctx, it->second, child(path, t.name), v)) t.value = v;
      }
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

void parse_route(Ctx& ctx, const YAML::Node& n, const std::string& path, RouteSection& r) {
  MapView m(ctx, n, path,
            {"name", "match", "cluster", "direct_response", "redirect", "rewrite", "request_headers",
             "response_headers", "timeout", "retries", "max_concurrent_requests", "upgrades"});
  if (!n.IsMap()) return;
  m.read("name", r.name);
  MapView mm(ctx, m.get("match"), m.path("match"),
             {"host", "path", "path_prefix", "path_regex", "methods", "headers", "query", "listener"});
  mm.read("host", r.match.host);
  mm.read("path", r.match.path_exact);
  mm.read("path_prefix", r.match.path_prefix);
  mm.read("path_regex", r.match.path_regex);
  mm.read_strings("methods", r.match.methods);
  mm.read_strings("listener", r.match.listeners);
  parse_name_value_matchers(ctx, mm.get("headers"), mm.path("headers"), r.match.headers);
  parse_name_value_matchers(ctx, mm.get("query"), mm.path("query"), r.match.query);
  int paths = !r.match.path_exact.empty() + !r.match.path_prefix.empty() + !r.match.path_regex.empty();
  if (paths > 1) ctx.error(m.get("match"), m.path("match"), "use only one of path, path_prefix, path_regex");
  for (const char* key : {"path", "path_prefix"}) {
    std::string v = key == std::string("path") ? r.match.path_exact : r.match.path_prefix;
    if (!v.empty() && v.front() != '/') {
      ctx.error(mm.get(key), mm.path(key), "must start with /");
      continue;
    }
    // Requests are matched on the normalized path (http/path.h): a matcher that is not
    // normal itself could never match (and would look like an access rule that holds).
    std::string normal = v;
    http::PathResult pr = http::normalize_path(normal, http::PathOptions{});
    if (!v.empty() && (pr.error != http::PathError::kNone || pr.changed)) {
      ctx.error(mm.get(key), mm.path(key),
                "\"" + v + "\" is not a normalized path and would never match (requests are matched after "
                "normalization" + (pr.error == http::PathError::kNone ? "; write \"" + normal + "\")" : ")"));
    }
  }
  if (!r.match.path_regex.empty()) {
    try {
      std::regex re(r.match.path_regex, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      ctx.error(mm.get("path_regex"), mm.path("path_regex"), std::string("invalid regular expression: ") + e.what());
    }
  }
  if (!r.match.host.empty()) {
    const std::string& h = r.match.host;
    bool wildcard = h.rfind("*.", 0) == 0;
    if (h.find('*', wildcard ? 1 : 0) != std::string::npos || h.find('/') != std::string::npos) {
      ctx.error(mm.get("host"), mm.path("host"), "host must be exact or *.suffix");
    }
  }

  m.read("cluster", r.cluster);
  if (m.has("direct_response")) {
    DirectResponseSection d;
    MapView dm(ctx, m.get("direct_response"), m.path("direct_response"), {"status", "body", "headers"});
    dm.read_num("status", d.status, 100, 599);
    dm.read("body", d.body);
    parse_pairs(ctx, dm.get("headers"), dm.path("headers"), d.headers);
    r.direct_response = d;
  }
  if (m.has("redirect")) {
    RedirectSection rd;
    MapView rm(ctx, m.get("redirect"), m.path("redirect"), {"status", "location"});
    rm.read_num("status", rd.status, 300, 399);
    rm.read("location", rd.location);
    if (rd.location.empty()) ctx.error(m.get("redirect"), m.path("redirect"), "missing required key \"location\"");
    if (rd.status != 301 && rd.status != 302 && rd.status != 303 && rd.status != 307 && rd.status != 308) {
      ctx.error(rm.get("status"), rm.path("status"), "redirect status must be 301, 302, 303, 307 or 308");
    }
    r.redirect = rd;
  }
  int actions = !r.cluster.empty() + r.direct_response.has_value() + r.redirect.has_value();
  if (actions != 1) {
    ctx.error(n, path, actions == 0 ? "a route needs one of cluster, direct_response or redirect"
                                    : "a route takes only one of cluster, direct_response or redirect");
  }
  MapView rw(ctx, m.get("rewrite"), m.path("rewrite"), {"strip_prefix", "path", "host"});
  rw.read("strip_prefix", r.strip_prefix);
  rw.read("path", r.rewrite_path);
  rw.read("host", r.rewrite_host);
  if (!r.rewrite_path.empty() && r.rewrite_path.front() != '/') ctx.error(rw.get("path"), rw.path("path"), "must start with /");
  parse_header_ops(ctx, m.get("request_headers"), m.path("request_headers"), r.request_headers);
  parse_header_ops(ctx, m.get("response_headers"), m.path("response_headers"), r.response_headers);
  m.read_duration("timeout", r.timeout);
  m.read_num("max_concurrent_requests", r.max_concurrent_requests, 0, 100'000'000);
  if (m.has("upgrades") && m.read_strings("upgrades", r.upgrades)) {
    for (std::string& u : r.upgrades) {
      // A protocol name is a token, like a field name (RFC 9110 §7.8).
      if (!is_field_name(u)) ctx.error(m.get("upgrades"), m.path("upgrades"), "\"" + u + "\" is not a protocol name");
      for (char& c : u) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
    }
  }
  YAML::Node rt = m.get("retries");
  if (rt.IsDefined()) {
    MapView rm(ctx, rt, m.path("retries"), {"attempts", "on", "budget_percent", "min_retry_concurrency"});
    rm.read_num("attempts", r.retries.attempts, 0, 10);
    rm.read_num("budget_percent", r.retries.budget_percent, 0, 100);
    rm.read_num("min_retry_concurrency", r.retries.min_retry_concurrency, 0, 100000);
    std::vector<std::string> on;
    if (rm.has("on") && rm.read_strings("on", on)) {
      r.retries.on.clear();
      for (std::size_t i = 0; i < on.size(); ++i) {
        const std::string& s = on[i];
        if (s == "connect_failure") r.retries.on.push_back(RetryOn::kConnectFailure);
        else if (s == "reset") r.retries.on.push_back(RetryOn::kReset);
        else if (s == "5xx") r.retries.on.push_back(RetryOn::k5xx);
        else if (s == "gateway_error") r.retries.on.push_back(RetryOn::kGatewayError);
        else if (s == "timeout") r.retries.on.push_back(RetryOn::kTimeout);
        else ctx.error(rm.get("on"), index(rm.path("on"), i),
                       "unknown retry condition \"" + s + "\"" +
                           detail::did_you_mean(s, {"connect_failure", "reset", "5xx", "gateway_error", "timeout"}));
      }
    }
  }
}

void parse_logging(Ctx& ctx, const YAML::Node& n, LoggingSection& l) {
  MapView m(ctx, n, "logging", {"level", "format", "access_log", "queue_size"});
  auto fmt = [&](const MapView& v, std::string_view key, LogFormat& out) {
    std::string s;
    if (!v.read(key, s) || s.empty()) return;
    if (s == "text") out = LogFormat::kText;
    else if (s == "json") out = LogFormat::kJson;
    else ctx.error(v.get(key), v.path(key), "expected text or json, got \"" + s + "\"");
  };
  if (m.read("level", l.level)) {
    static const std::vector<std::string> levels{"trace", "debug", "info", "warning", "error", "critical", "off"};
    if (std::find(levels.begin(), levels.end(), l.level) == levels.end()) {
      ctx.error(m.get("level"), m.path("level"),
                "unknown level \"" + l.level + "\"" + detail::did_you_mean(l.level, levels));
    }
  }
  fmt(m, "format", l.format);
  m.read_num("queue_size", l.queue_size, 16, 10'000'000);
  YAML::Node al = m.get("access_log");
  if (al.IsDefined()) {
    if (al.IsScalar()) {
      bool on = true;
      m.read("access_log", on);
      l.access_log = on;
    } else {
      MapView a(ctx, al, m.path("access_log"), {"enabled", "path", "format"});
      a.read("enabled", l.access_log);
      a.read("path", l.access_log_path);
      fmt(a, "format", l.access_log_format);
    }
  }
}

void validate(Ctx& ctx, const YAML::Node& root, Config& c) {
  auto named = [&](const char* section, auto& items) {
    std::set<std::string> seen;
    YAML::Node list = root[section];
    for (std::size_t i = 0; i < items.size(); ++i) {
      const std::string& name = items[i].name;
      YAML::Node at = list.IsSequence() && i < list.size() ? list[i] : root;
      if (name.empty()) continue;
      if (!seen.insert(name).second) {
        YAML::Node nn = at.IsMap() ? at["name"] : at;
        ctx.error(nn, index(section, i) + ".name", "duplicate name \"" + name + "\"");
      }
    }
  };
  named("listeners", c.listeners);
  named("clusters", c.clusters);
  named("routes", c.routes);

  if (c.listeners.empty()) ctx.error(root, "listeners", "at least one listener is required");
  std::set<std::string> addrs;
  if (c.admin.enabled) addrs.insert(c.admin.address.text());
  for (std::size_t i = 0; i < c.listeners.size(); ++i) {
    auto& l = c.listeners[i];
    if (l.name.empty()) l.name = "listener" + std::to_string(i);
    if (l.address.port != 0 && !addrs.insert(l.address.text()).second) {
      ctx.error(root["listeners"][i]["address"], index("listeners", i) + ".address",
                "address " + l.address.text() + " is already used by another listener or the admin endpoint");
    }
  }
  std::vector<std::string> cluster_names, listener_names;
  for (const auto& cl : c.clusters) cluster_names.push_back(cl.name);
  for (const auto& l : c.listeners) listener_names.push_back(l.name);
  for (std::size_t i = 0; i < c.routes.size(); ++i) {
    auto& r = c.routes[i];
    if (r.name.empty()) r.name = "route" + std::to_string(i);
    if (!r.cluster.empty() && c.find_cluster(r.cluster) == nullptr) {
      ctx.error(root["routes"][i]["cluster"], index("routes", i) + ".cluster",
                "unknown cluster \"" + r.cluster + "\"" + detail::did_you_mean(r.cluster, cluster_names));
    }
    for (const auto& ln : r.match.listeners) {
      if (std::find(listener_names.begin(), listener_names.end(), ln) == listener_names.end()) {
        ctx.error(root["routes"][i]["match"]["listener"], index("routes", i) + ".match.listener",
                  "unknown listener \"" + ln + "\"" + detail::did_you_mean(ln, listener_names));
      }
    }
  }
}

LoadResult load_node(const YAML::Node& root, Ctx& ctx, const std::string& name) {
  LoadResult res;
  auto cfg = std::make_shared<Config>();
  cfg->source = name;
  if (!root.IsDefined() || root.IsNull()) {
    ctx.error(root, "", "the configuration is empty");
  } else {
    MapView top(ctx, root, "",
                {"runtime", "admin", "listeners", "limits", "clusters", "routes", "logging", "drain_timeout"});
    if (root.IsMap()) {
      parse_runtime(ctx, top.get("runtime"), cfg->runtime);
      parse_admin(ctx, top.get("admin"), cfg->admin);
      for_each_item(ctx, top.get("listeners"), "listeners", [&](const YAML::Node& n, const std::string& p) {
        ListenerSection l;
        parse_listener(ctx, n, p, l);
        cfg->listeners.push_back(std::move(l));
      });
      parse_limits(ctx, top.get("limits"), cfg->limits);
      for_each_item(ctx, top.get("clusters"), "clusters", [&](const YAML::Node& n, const std::string& p) {
        ClusterSection c;
        parse_cluster(ctx, n, p, c);
        cfg->clusters.push_back(std::move(c));
      });
      for_each_item(ctx, top.get("routes"), "routes", [&](const YAML::Node& n, const std::string& p) {
        RouteSection r;
        parse_route(ctx, n, p, r);
        cfg->routes.push_back(std::move(r));
      });
      parse_logging(ctx, top.get("logging"), cfg->logging);
      top.read_duration("drain_timeout", cfg->drain_timeout);
      validate(ctx, root, *cfg);
    }
  }
  res.errors = std::move(ctx.errors);
  // In file order, which is how an operator reads and fixes them.
  std::stable_sort(res.errors.begin(), res.errors.end(), [](const ConfigError& a, const ConfigError& b) {
    return std::tie(a.line, a.column) < std::tie(b.line, b.column);
  });
  if (res.errors.empty()) res.config = std::move(cfg);
  return res;
}

}  // namespace

LoadResult load_string(const std::string& yaml, const std::string& name) {
  Ctx ctx;
  ctx.file = name;
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::ParserException& e) {
    ctx.error(e.mark, "", e.msg);
    LoadResult r;
    r.errors = std::move(ctx.errors);
    return r;
  }
  try {
    return load_node(root, ctx, name);
  } catch (const YAML::Exception& e) {
    ctx.error(e.mark, "", e.msg);
    LoadResult r;
    r.errors = std::move(ctx.errors);
    return r;
  }
}

LoadResult load_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    LoadResult r;
    r.errors.push_back({path, 0, 0, "", "cannot open file"});
    return r;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return load_string(ss.str(), path);
}

}  // namespace sg::config
