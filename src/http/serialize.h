// Serializing message heads and chunked framing. stealgate forwards only framing it
// produces itself: heads are rebuilt from parsed fields, bodies re-framed.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "http/headers.h"

namespace sg::http {

std::string_view reason_phrase(int status) noexcept;

// "<method> <target> HTTP/1.1\r\n" + fields + "\r\n"
void append_request_head(std::string& out, std::string_view method, std::string_view target,
                         const HeaderMap& headers);
// "HTTP/1.<minor> <status> <reason>\r\n" + fields + "\r\n"
void append_response_head(std::string& out, int minor, int status, std::string_view reason,
                          const HeaderMap& headers);
void append_fields(std::string& out, const HeaderMap& headers);

// "<hex size>\r\n" for a chunk of n bytes (n > 0).
void append_chunk_size(std::string& out, std::size_t n);

// IMF-fixdate for the current second, e.g. "Sun, 29 Nov 2026 10:00:00 GMT" (cached per
// thread, recomputed once a second).
std::string_view http_date_now();

}  // namespace sg::http
