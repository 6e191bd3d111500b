#include "proxy/local_reply.h"

#include "http/headers.h"
#include "http/serialize.h"

namespace sg::proxy {

std::string render_local_reply(const LocalReply& r) {
  std::string body = r.body;
  if (body.empty() && r.status >= 400) {
    body = std::to_string(r.status) + " " + std::string(http::reason_phrase(r.status)) + "\n";
  }
  http::HeaderMap h;
  h.add("Date", std::string(http::http_date_now()));
  h.add("Server", "stealgate");
  bool has_type = false;
  for (const auto& [k, v] : r.headers) {
    if (http::iequals(k, "content-type")) has_type = true;
    h.add(k, v);
  }
  bool bodiless = r.status == 204 || r.status == 304 || (r.status >= 100 && r.status < 200);
  if (!bodiless) {
    if (!has_type && !body.empty()) h.add("Content-Type", "text/plain; charset=utf-8");
    h.add("Content-Length", std::to_string(body.size()));
  }
  if (r.close) h.add("Connection", "close");
  std::string out;
  out.reserve(256 + body.size());
  http::append_response_head(out, r.minor, r.status, {}, h);
  if (!r.head && !bodiless) out += body;
  return out;
}

LocalReply service_unavailable(const config::LimitsSection& limits) {
  LocalReply lr;
  lr.status = 503;
  lr.headers.emplace_back("Retry-After", std::to_string(limits.retry_after_seconds));
  return lr;
}

}  // namespace sg::proxy
