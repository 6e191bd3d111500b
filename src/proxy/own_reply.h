// The replies stealgate makes itself to a request that found its route, before any
// admission or upstream: the route's rate limit (a 429), its direct response or redirect,
// and the answer to OPTIONS with Max-Forwards: 0.
#pragma once

#include <optional>

#include "http/message.h"
#include "proxy/exchange.h"
#include "proxy/gateway.h"
#include "proxy/local_reply.h"
#include "routing/route_table.h"

namespace sg::proxy {

// The reply stealgate makes itself to a routed request, if it makes one (and counts a
// rate-limit refusal in the route's statistics). May decrement the request's
// Max-Forwards, which then goes upstream.
std::optional<LocalReply> own_reply(const Snapshot& snap, const routing::CompiledRoute& route,
                                    http::RequestHead& req, RequestContext& ctx);

}  // namespace sg::proxy
