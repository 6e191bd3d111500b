#include "proxy/local_reply.h"

#include "http/headers.h"
#include "http/serialize.h"

namespace sg::proxy {

namespace {

bool bodiless(int status) { return status == 204 || status == 304 || (status >= 100 && status < 200); }

std::string body_of(const LocalReply& r) {
  if (!r.body.empty() || r.status < 400) return r.body;
  return std::to_string(r.status) + " " + std::string(http::reason_phrase(r.status)) + "\n";
}

}  // namespace

std::size_t local_reply_body_bytes(const LocalReply& r) {
  return r.head || bodiless(r.status) ? 0 : body_of(r).size();
}

std::string render_local_reply(const LocalReply& r) {
  const std::string body = body_of(r);
  http::HeaderMap h;
  h.add("Date", std::string(http::http_date_now()));
  h.add("Server", "stealgate");
  bool has_type = false;
  for (const auto& [k, v] : r.headers) {
    if (http::iequals(k, "content-type")) has_type = true;
    h.add(k, v);
  }
  const bool no_body = bodiless(r.status);
  if (!no_body) {
    if (!has_type && !body.empty()) h.add("Content-Type", "text/plain; charset=utf-8");
    h.add("Content-Length", std::to_string(body.size()));
  }
  if (r.close) h.add("Connection", "close");
  std::string out;
  out.reserve(256 + body.size());
  http::append_response_head(out, r.minor, r.status, {}, h);
  if (!r.head && !no_body) out += body;
  return out;
}

LocalReply service_unavailable(const config::LimitsSection& limits) {
  LocalReply lr;
  lr.status = 503;
  lr.headers.emplace_back("Retry-After", std::to_string(limits.retry_after_seconds));
  return lr;
}

}  // namespace sg::proxy
