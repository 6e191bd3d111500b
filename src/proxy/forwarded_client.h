// listeners[].trusted_proxies: who the client of a request is when it came through HTTP
// proxies in front (a CDN, an HTTP load balancer) that each append the address they got
// the request from to X-Forwarded-For.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "http/headers.h"
#include "routing/address_block.h"

namespace sg::proxy {

// Walks X-Forwarded-For (every field line, in order) from its right end, the entry the
// connection's peer appended, leftwards: a trusted proxy's address is passed over, and
// the first address that is not one is the client (nginx's real_ip_recursive, Envoy's
// trusted hops). Everything further left is the client's own to write, so it is not read.
// The peer itself when it is not a trusted proxy; the last trusted hop when the list runs
// out or reaches something that is not an address. The client's IP text: `peer_ip`, or
// a copy in `storage`.
std::string_view forwarded_client(const http::HeaderMap& headers, std::string_view peer_ip,
                                  const std::vector<routing::AddressBlock>& trusted, std::string& storage);

}  // namespace sg::proxy
