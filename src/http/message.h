// Parsed HTTP/1.x message heads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "http/headers.h"

namespace sg::http {

enum class BodyKind : uint8_t {
  kNone,           // no body (no CL/TE on a request; HEAD/1xx/204/304 responses)
  kContentLength,  // exactly content_length bytes
  kChunked,        // chunked transfer coding
  kUntilClose,     // response delimited by the connection closing
};

struct RequestHead {
  std::string method;
  std::string target;       // as received (origin-, absolute-, authority- or asterisk-form)
  int version_major = 1;
  int version_minor = 1;
  HeaderMap headers;

  // Derived at parse time.
  std::string path;         // origin-form path (absolute-form targets are reduced to it)
  std::string query;        // without '?'
  std::string authority;    // Host header, or the authority of an absolute-form target
  BodyKind body = BodyKind::kNone;
  uint64_t content_length = 0;
  bool keep_alive = true;
  bool expect_continue = false;
  bool upgrade = false;     // an Upgrade request (Connection: upgrade + Upgrade)

  bool is_http10() const { return version_major == 1 && version_minor == 0; }
  bool is_head() const { return method == "HEAD"; }
  // Back to a fresh head, keeping the strings' and the header list's memory for the next
  // message on the connection.
  void reset() {
    method.clear();
    target.clear();
    version_major = version_minor = 1;
    headers.clear();
    path.clear();
    query.clear();
    authority.clear();
    body = BodyKind::kNone;
    content_length = 0;
    keep_alive = true;
    expect_continue = false;
    upgrade = false;
  }
};

struct ResponseHead {
  int status = 0;
  std::string reason;
  int version_major = 1;
  int version_minor = 1;
  HeaderMap headers;

  BodyKind body = BodyKind::kNone;
  uint64_t content_length = 0;
  bool keep_alive = true;

  bool is_informational() const { return status >= 100 && status < 200; }
  void reset() {  // as RequestHead::reset
    status = 0;
    reason.clear();
    version_major = version_minor = 1;
    headers.clear();
    body = BodyKind::kNone;
    content_length = 0;
    keep_alive = true;
  }
};

}  // namespace sg::http
