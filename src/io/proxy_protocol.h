// The PROXY protocol (HAProxy's spec, versions 1 and 2): a header a load balancer in front
// (AWS NLB, HAProxy in TCP mode, another stealgate) sends at the start of a connection,
// saying whose connection it relays. A listener with `proxy_protocol: true` requires it on
// every connection, before TLS or HTTP, and takes its source address as the client's
// (access rules, rate limits, X-Forwarded-For, the access log). Requiring it is what makes
// it safe: a client that could choose whether to send one could claim any address.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <string_view>

#include "exec/coro.h"
#include "io/socket.h"
#include "io/tcp.h"

namespace sg::io {

struct ProxyHeader {
  enum class Status : uint8_t { kNeedMore, kInvalid, kDone } status = Status::kNeedMore;
  std::size_t length = 0;               // kDone: the header's bytes (what follows is the client's)
  std::optional<tcp::endpoint> source;  // kDone: the client; none for LOCAL / UNKNOWN (a
                                        // connection of the proxy's own: keep the TCP peer)
  std::string error;                    // kInvalid: why

  static ProxyHeader invalid(std::string why) {
    ProxyHeader h;
    h.status = Status::kInvalid;
    h.error = std::move(why);
    return h;
  }
};

// The longest header taken: v1's is at most 107 bytes; v2's carries TLVs (AWS adds its
// VPC endpoint's id), far below this in practice.
inline constexpr std::size_t kMostProxyHeaderBytes = 4096;

// Parses the start of a connection. kNeedMore: `bytes` is a prefix of a header that may
// still be valid (every byte of it belongs to the header).
ProxyHeader parse_proxy_header(std::string_view bytes);

// Reads the header from the start of `s`, taking exactly its bytes, by `dl`. kDone, or
// kInvalid with why (a malformed or missing header, the peer gone, the deadline passed).
exec::Task<ProxyHeader> read_proxy_header(TcpStream& s, Deadline dl);

}  // namespace sg::io
