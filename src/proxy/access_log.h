// The access log: one line per request (text or JSON, logging.access_log), with the
// connection's TLS fields on TLS listeners.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "http/message.h"
#include "proxy/exchange.h"

namespace sg::proxy {

void write_access_log(const RequestContext& c, const http::RequestHead& req, uint64_t duration_us);
// A request refused before it was parsed or routed (malformed, too slow, a refused path).
void log_refused_request(std::string_view peer, int status, const std::string& note);

}  // namespace sg::proxy
