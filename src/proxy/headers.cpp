#include "proxy/headers.h"

#include <array>
#include <random>

#include "http/serialize.h"

namespace sg::proxy {

namespace {

constexpr std::array<std::string_view, 9> kHopByHop = {
    "connection", "keep-alive", "proxy-connection", "te", "transfer-encoding",
    "upgrade",    "trailer",    "proxy-authenticate", "proxy-authorization"};

// Fields a client may not make us drop by naming them in Connection.
constexpr std::array<std::string_view, 8> kProtected = {"host", "content-length", "x-forwarded-for",
                                                        "x-forwarded-proto", "x-forwarded-host", "x-request-id",
                                                        "via", "forwarded"};

bool is_protected(std::string_view name) {
  for (auto p : kProtected) {
    if (http::iequals(name, p)) return true;
  }
  return false;
}

void append_list(http::HeaderMap& h, std::string_view name, std::string_view value) {
  std::string joined = h.joined(name);
  h.remove(name);
  h.add(std::string(name), joined.empty() ? std::string(value) : joined + ", " + std::string(value));
}

}  // namespace

void strip_hop_by_hop(http::HeaderMap& h) {
  // Fields named by Connection go first (before Connection itself is removed).
  std::vector<std::string> named;
  for (const auto& f : h) {
    if (!http::iequals(f.name, "connection")) continue;
    http::for_each_list_item(f.value, [&](std::string_view tok) {
      if (!is_protected(tok)) named.emplace_back(tok);
      return true;
    });
  }
  for (const auto& n : named) h.remove(n);
  for (auto n : kHopByHop) h.remove(n);
}

http::HeaderMap upstream_request_headers(const http::RequestHead& req, const config::RouteSection* route,
                                         const ForwardInfo& info) {
  http::HeaderMap h = req.headers;
  std::string upgrade_proto;
  if (info.upgrade) {
    if (const std::string* u = req.headers.get("upgrade")) upgrade_proto = *u;
  }
  strip_hop_by_hop(h);
  h.remove("content-length");
  h.remove("expect");  // re-added below when the client asked for it
  // Framing we produce.
  if (req.body == http::BodyKind::kContentLength) {
    h.add("Content-Length", std::to_string(req.content_length));
  } else if (req.body == http::BodyKind::kChunked) {
    h.add("Transfer-Encoding", "chunked");
  } else if (req.method == "POST" || req.method == "PUT" || req.method == "PATCH") {
    h.add("Content-Length", "0");
  }
  if (req.expect_continue) h.add("Expect", "100-continue");
  if (info.upgrade && !upgrade_proto.empty()) {
    h.add("Connection", "upgrade");
    h.add("Upgrade", upgrade_proto);
  }
  if (route != nullptr && !route->rewrite_host.empty()) h.set("Host", route->rewrite_host);
  if (!h.contains("host") && !req.authority.empty()) h.add("Host", req.authority);
  append_list(h, "X-Forwarded-For", info.client_ip);
  append_list(h, "X-Forwarded-Proto", info.proto);
  if (!req.authority.empty()) append_list(h, "X-Forwarded-Host", req.authority);
  append_list(h, "Via", req.is_http10() ? "1.0 stealgate" : "1.1 stealgate");
  h.set("X-Request-Id", std::string(info.request_id));
  if (route != nullptr) apply_header_ops(h, route->request_headers);
  return h;
}

http::HeaderMap client_response_headers(const http::ResponseHead& resp, const config::RouteSection* route,
                                        bool chunked_to_client, bool close, bool upgrade) {
  http::HeaderMap h = resp.headers;
  std::string upgrade_proto;
  if (upgrade) {
    if (const std::string* u = resp.headers.get("upgrade")) upgrade_proto = *u;
  }
  bool keep_cl = resp.body == http::BodyKind::kContentLength ||
                 (resp.body == http::BodyKind::kNone && resp.headers.contains("content-length"));
  std::string cl = keep_cl && resp.headers.get("content-length") != nullptr ? *resp.headers.get("content-length") : "";
  strip_hop_by_hop(h);
  h.remove("content-length");
  if (keep_cl && !cl.empty() && resp.status != 204 && !resp.is_informational()) h.add("Content-Length", cl);
  if (chunked_to_client) h.add("Transfer-Encoding", "chunked");
  if (!h.contains("date")) h.add("Date", std::string(http::http_date_now()));
  append_list(h, "Via", resp.version_minor == 0 ? "1.0 stealgate" : "1.1 stealgate");
  if (upgrade) {
    h.add("Connection", "upgrade");
    if (!upgrade_proto.empty()) h.add("Upgrade", upgrade_proto);
  } else if (close) {
    h.add("Connection", "close");
  }
  if (route != nullptr) apply_header_ops(h, route->response_headers);
  return h;
}

void apply_header_ops(http::HeaderMap& h, const config::HeaderOps& ops) {
  for (const auto& n : ops.remove) h.remove(n);
  for (const auto& [k, v] : ops.set) h.set(k, v);
  for (const auto& [k, v] : ops.add) h.add(k, v);
}

std::string request_id_for(const http::RequestHead& req) {
  if (const std::string* id = req.headers.get("x-request-id")) {
    bool sane = !id->empty() && id->size() <= 128;
    for (char c : *id) sane = sane && c > 0x20 && c < 0x7f;
    if (sane) return *id;
  }
  thread_local std::mt19937_64 rng(std::random_device{}());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(32, '0');
  uint64_t a = rng(), b = rng();
  for (int i = 0; i < 16; ++i) {
    out[static_cast<std::size_t>(i)] = kHex[(a >> (i * 4)) & 0xf];
    out[static_cast<std::size_t>(16 + i)] = kHex[(b >> (i * 4)) & 0xf];
  }
  return out;
}

bool is_idempotent(std::string_view m) {
  return m == "GET" || m == "HEAD" || m == "OPTIONS" || m == "TRACE" || m == "PUT" || m == "DELETE";
}

}  // namespace sg::proxy
