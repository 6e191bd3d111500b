// Header handling at the proxy boundary (RFC 9110 §7.6): what is forwarded upstream and
// what is returned to the client. Hop-by-hop fields are removed (Connection and every
// field it names, Keep-Alive, Proxy-Connection, TE, Transfer-Encoding, Upgrade, Trailer,
// Proxy-Authenticate, Proxy-Authorization) before stealgate adds its own, and framing is
// always the one stealgate produces.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "config/schema.h"
#include "http/message.h"

namespace sg::proxy {

struct ForwardInfo {
  std::string_view peer_ip;  // appended to X-Forwarded-For: the address the request came from
  std::string_view request_id;
  std::string_view proto = "http";
  // The Upgrade value forwarded (the allowed protocols the client offered, see
  // allowed_upgrade()); empty: not forwarded as an upgrade.
  std::string_view upgrade;
  // The authority of a request that names none (an HTTP/1.0 request without Host, in
  // origin form): the address the client connected to, as RFC 9112 §3.3 reconstructs the
  // target URI. Sent upstream as Host, which HTTP/1.1 requires (an empty one, which the
  // RFC allows, makes nginx and others answer 400).
  std::string_view default_authority;
};

// For an Upgrade request (RFC 9110 §7.8): the protocols it offers that `allowed` (lower-case
// names) lists, joined as an Upgrade value ("websocket"); "" when none is allowed, and then
// the request goes upstream as plain HTTP/1.1 without Upgrade (h2c never passes unless a
// route lists it). `refused` is set when the client offered something that was dropped.
std::string allowed_upgrade(const http::RequestHead& req, const std::vector<std::string>& allowed, bool& refused);

// Whether a 101 response switches to one of the protocols in `offered` (an Upgrade value
// produced by allowed_upgrade()).
bool upgrade_matches(const http::ResponseHead& resp, std::string_view offered);

// Removes hop-by-hop fields (and those named by Connection, except fields stealgate owns:
// Host, Content-Length, X-Forwarded-*, X-Request-Id, Via).
void strip_hop_by_hop(http::HeaderMap& h);

// Appends the upstream request head (start line, forwarded fields, our framing and
// forwarding fields, the route's header operations, the empty line), written in one pass
// over the client's fields without copying them into a new header list.
void append_upstream_request_head(std::string& out, const http::RequestHead& req, std::string_view target,
                                  const config::RouteSection* route, const ForwardInfo& info);

// Appends the client response head likewise. `chunked_to_client` says how stealgate frames
// the body it sends; `close` adds Connection: close.
void append_client_response_head(std::string& out, const http::ResponseHead& resp, std::string_view reason,
                                 const config::RouteSection* route, bool chunked_to_client, bool close,
                                 bool upgrade);

// The header that carries the verified client-certificate subject upstream from this
// listener's connections (mTLS on); "" where none does. A client's field of that name is
// never passed on, in the head or in a trailer.
inline std::string_view client_subject_header(const config::ListenerSection& l) {
  return l.tls && l.tls->client_auth != config::ClientAuth::kOff ? std::string_view(l.tls->client_subject_header)
                                                                  : std::string_view{};
}

// The last chunk of a chunked body, with those of `trailers` that may pass. A trailer
// passes only where the same field would pass unchanged in a head: never a framing,
// hop-by-hop or forwarding field, one the route's header operations `ops` remove or set,
// or `owned` (the client-certificate subject header). A recipient that merges trailers
// into the head, which RFC 9110 §6.5.1 forbids but some do, would take those as ours.
std::string last_chunk(const http::HeaderMap& trailers, const config::HeaderOps* ops, std::string_view owned = {});

// A request's id: the client's X-Request-Id when it is sane (printable, at most 128
// bytes), else a new random one (32 hex digits), kept inline: a generated id costs no
// allocation (a 32-byte std::string was a malloc and free per request).
class RequestId {
 public:
  static RequestId for_request(const http::RequestHead& req);
  std::string_view view() const { return supplied_.empty() ? std::string_view(generated_, kDigits) : supplied_; }

 private:
  static constexpr std::size_t kDigits = 32;
  char generated_[kDigits] = {};
  std::string supplied_;
};

// GET, HEAD, OPTIONS, TRACE, PUT, DELETE (RFC 9110 §9.2.2).
bool is_idempotent(std::string_view method);

}  // namespace sg::proxy
