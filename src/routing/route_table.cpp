#include "routing/route_table.h"

#include <algorithm>

#include <re2/re2.h>

#include "http/headers.h"

namespace sg::routing {

std::string_view host_without_port(std::string_view a) {
  if (!a.empty() && a.front() == '[') {
    std::size_t close = a.find(']');
    return close == std::string_view::npos ? a : a.substr(0, close + 1);
  }
  std::size_t colon = a.rfind(':');
  return colon == std::string_view::npos ? a : a.substr(0, colon);
}

std::optional<std::string_view> query_param(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    std::size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    std::size_t eq = pair.find('=');
    std::string_view k = pair.substr(0, eq);
    if (k == name) return eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1);
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

bool CompiledRoute::matches(const http::RequestHead& req, std::string_view listener,
                            const ClientAddress& client) const {
  if (!listeners.empty() && std::find(listeners.begin(), listeners.end(), listener) == listeners.end()) return false;
  if (!sources.empty()) {
    // An address that does not parse (none does not, from a TCP peer) matches no block.
    const std::optional<IpAddress>& a = client.get();
    if (!a || std::none_of(sources.begin(), sources.end(), [&](const AddressBlock& b) { return b.contains(*a); })) {
      return false;
    }
  }
  if (host_kind != HostKind::kAny) {
    std::string_view h = host_without_port(req.authority);
    if (host_kind == HostKind::kExact) {
      if (!http::iequals(h, host)) return false;
    } else {
      // "*.example.com" matches a.example.com and a.b.example.com, not example.com itself.
      if (h.size() <= host.size() || !http::iequals(h.substr(h.size() - host.size()), host)) return false;
    }
  }
  switch (path_kind) {
    case PathKind::kAny: break;
    case PathKind::kExact:
      if (case_sensitive ? req.path != path : !http::iequals(req.path, path)) return false;
      break;
    case PathKind::kPrefix:
      if (req.path.size() < path.size()) return false;
      if (case_sensitive ? req.path.compare(0, path.size(), path) != 0
                         : !http::iequals(std::string_view(req.path).substr(0, path.size()), path)) {
        return false;
      }
      break;
    case PathKind::kRegex:
      if (!re2::RE2::FullMatch(req.path, *path_regex)) return false;
      break;
  }
  if (!methods.empty() && std::find(methods.begin(), methods.end(), req.method) == methods.end()) return false;
  for (const auto& hm : cfg->match.headers) {
    const std::string* v = req.headers.get(hm.name);
    if (v == nullptr) return false;
    if (hm.value && *v != *hm.value) return false;
  }
  for (const auto& qm : cfg->match.query) {
    auto v = query_param(req.query, qm.name);
    if (!v) return false;
    if (qm.value && *v != *qm.value) return false;
  }
  return true;
}

Result<RouteTable> RouteTable::build(const config::Config& cfg,
                                     const std::vector<std::shared_ptr<upstream::Cluster>>& clusters,
                                     std::string& error) {
  RouteTable t;
  t.routes_.reserve(cfg.routes.size());
  for (std::size_t i = 0; i < cfg.routes.size(); ++i) {
    const auto& r = cfg.routes[i];
    CompiledRoute c;
    c.cfg = &r;
    c.index = i;
    if (!r.cluster.empty()) {
      for (const auto& cl : clusters) {
        if (cl->name() == r.cluster) c.cluster = cl;
      }
      if (!c.cluster) {
        error = "route \"" + r.name + "\": unknown cluster \"" + r.cluster + "\"";
        return std::make_error_code(std::errc::invalid_argument);
      }
    }
    if (!r.match.host.empty()) {
      if (r.match.host.rfind("*.", 0) == 0) {
        c.host_kind = CompiledRoute::HostKind::kSuffix;
        c.host = http::to_lower(r.match.host.substr(1));
      } else {
        c.host_kind = CompiledRoute::HostKind::kExact;
        c.host = http::to_lower(std::string(host_without_port(r.match.host)));
      }
    }
    c.case_sensitive = r.match.case_sensitive;
    if (!r.match.path_exact.empty()) {
      c.path_kind = CompiledRoute::PathKind::kExact;
      c.path = r.match.path_exact;
    } else if (!r.match.path_prefix.empty()) {
      c.path_kind = CompiledRoute::PathKind::kPrefix;
      c.path = r.match.path_prefix;
    } else if (!r.match.path_regex.empty()) {
      c.path_kind = CompiledRoute::PathKind::kRegex;
      re2::RE2::Options opt;
      opt.set_log_errors(false);
      opt.set_case_sensitive(c.case_sensitive);
      c.path_regex = std::make_shared<const re2::RE2>(r.match.path_regex, opt);
      if (!c.path_regex->ok()) {
        error = "route \"" + r.name + "\": path_regex: " + c.path_regex->error();
        return std::make_error_code(std::errc::invalid_argument);
      }
    }

    c.methods = r.match.methods;
    c.listeners = r.match.listeners;
    for (const std::string& text : r.match.sources) {
      AddressBlock b;
      if (std::string why = parse_address_block(text, b); !why.empty()) {
        error = "route \"" + r.name + "\": source: " + why;
        return std::make_error_code(std::errc::invalid_argument);
      }
      c.sources.push_back(b);
    }
    t.routes_.push_back(std::move(c));
  }
  return t;
}

const CompiledRoute* RouteTable::match(const http::RequestHead& req, std::string_view listener,
                                       const ClientAddress& client) const {
  for (const auto& r : routes_) {
    if (r.matches(req, listener, client)) return &r;
  }
  return nullptr;
}

}  // namespace sg::routing
