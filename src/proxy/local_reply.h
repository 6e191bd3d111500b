// Responses stealgate generates itself: errors (400, 404, 408, 413, 414, 417, 431, 501,
// 502, 503, 504, 505), direct responses and redirects. Short plain-text bodies; Date and
// Content-Length always; Connection: close when the connection will not be reused.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/schema.h"

namespace sg::proxy {

struct LocalReply {
  int status = 500;
  std::string body;  // empty: "<status> <reason>\n"
  std::vector<std::pair<std::string, std::string>> headers;
  bool close = false;
  bool head = false;  // answering HEAD: no body, same headers
  int minor = 1;      // HTTP/1.<minor> (the client's)
};

std::string render_local_reply(const LocalReply& r);
// The body bytes render_local_reply puts on the wire (none for HEAD and bodiless statuses):
// what the access log counts as sent.
std::size_t local_reply_body_bytes(const LocalReply& r);

// A 503 with Retry-After from limits.retry_after (every 503 stealgate makes: admission,
// no healthy endpoint, max_connections).
LocalReply service_unavailable(const config::LimitsSection& limits);

}  // namespace sg::proxy
