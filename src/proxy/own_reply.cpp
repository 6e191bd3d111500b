#include "proxy/own_reply.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <string>

namespace sg::proxy {

namespace {

// The reply a route makes itself (direct_response, redirect), if it makes one.
std::optional<LocalReply> route_reply(const config::RouteSection& r) {
  if (r.direct_response) {
    LocalReply lr;
    lr.status = r.direct_response->status;
    lr.body = r.direct_response->body;
    lr.headers = r.direct_response->headers;
    return lr;
  }
  if (r.redirect) {
    LocalReply lr;
    lr.status = r.redirect->status;
    lr.headers.emplace_back("Location", r.redirect->location);
    return lr;
  }
  return std::nullopt;
}

// Max-Forwards on OPTIONS (RFC 9110 §7.6.2; TRACE, the other method it applies to, the
// parser refuses): 0 makes stealgate the final recipient, which answers itself; a larger
// value goes upstream decremented. Returns the reply stealgate makes, if it makes one.
std::optional<LocalReply> apply_max_forwards(http::RequestHead& req, std::string& note) {
  if (req.method != "OPTIONS") return std::nullopt;
  const std::string* field = req.headers.get("max-forwards");
  if (field == nullptr) return std::nullopt;
  const std::string_view v = http::trim_ows(*field);
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  LocalReply lr;
  if (v.empty() || end != v.data() + v.size() || (ec != std::errc() && ec != std::errc::result_out_of_range) ||
      req.headers.count("max-forwards") > 1) {
    lr.status = 400;
    note = "invalid Max-Forwards";
    return lr;
  }
  if (ec == std::errc::result_out_of_range) n = UINT64_MAX;  // from_chars leaves n alone then
  if (n == 0) {
    lr.status = 200;
    lr.headers.emplace_back("Allow", "GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS");
    note = "Max-Forwards: 0, answered here";
    return lr;
  }
  constexpr uint64_t kMostForwards = 255;  // the most we pass on (a larger value is no different)
  req.headers.set("Max-Forwards", std::to_string(std::min(n - 1, kMostForwards)));
  return std::nullopt;
}

// routes[].rate_limit: a 429 with Retry-After (whole seconds until the key's next request
// would pass) when the key has used its allowance.
std::optional<LocalReply> rate_limited(RateLimiter& limit, const http::RequestHead& req, RequestContext& ctx) {
  const std::chrono::nanoseconds wait = limit.take(limit.key_of(req, ctx.client_ip), ctx.start);
  if (wait.count() == 0) return std::nullopt;
  LocalReply lr;
  lr.status = 429;
  const auto seconds = std::chrono::ceil<std::chrono::seconds>(wait).count();
  lr.headers.emplace_back("Retry-After", std::to_string(std::max<int64_t>(1, seconds)));
  ctx.note = "rate limited";
  return lr;
}

}  // namespace

std::optional<LocalReply> own_reply(const Snapshot& snap, const routing::CompiledRoute& route,
                                    http::RequestHead& req, RequestContext& ctx) {
  if (RateLimiter* limit = snap.rate_limits[route.index].get()) {
    if (std::optional<LocalReply> refused = rate_limited(*limit, req, ctx)) {
      snap.route_stats[route.index]->rate_limited.fetch_add(1, std::memory_order_relaxed);
      return refused;
    }
  }
  if (std::optional<LocalReply> own = route_reply(*route.cfg)) return own;
  return apply_max_forwards(req, ctx.note);
}

}  // namespace sg::proxy
