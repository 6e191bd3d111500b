// The client side of an exchange, as the upstream exchange (forward.cpp) sees it: interim
// responses, the final response (its head, then body pieces, framed for the client), local
// replies and protocol switches. Http1Response implements it for HTTP/1.x over an
// io::Stream (chunked re-framing, 1xx to 1.1 clients only, 100-continue, upgrade tunnels);
// an HTTP/2 stream would implement the same interface without touching routing, admission
// or the upstream side.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <system_error>

#include "common/function_ref.h"
#include "config/schema.h"
#include "exec/coro.h"
#include "http/message.h"
#include "http/stream.h"
#include "io/splice.h"
#include "io/stream.h"
#include "io/string_pool.h"
#include "proxy/exchange.h"
#include "proxy/local_reply.h"

namespace sg::proxy {

class DownstreamResponse {
 public:
  virtual ~DownstreamResponse() = default;

  // "100 Continue" for a client that sent Expect: 100-continue (at most once); false when
  // the client could not be written.
  virtual exec::Task<bool> send_continue() = 0;
  // An upstream's interim response (1xx other than 101), where the client can take one.
  virtual exec::Task<bool> send_interim(const http::ResponseHead& resp) = 0;
  // The final response. `keep_alive`: the request side allows the client connection to
  // serve another request. The head is held back and leaves with the first body bytes.
  virtual void start(const http::ResponseHead& resp, bool keep_alive) = 0;
  // Decoded body pieces; with `done`, the end of the body and the upstream's trailers.
  virtual exec::Task<std::error_code> send_body(std::span<const std::string_view> pieces, bool done,
                                                const http::HeaderMap& trailers) = 0;
  // Whether the body of the response started can reach the client unchanged from
  // `upstream`, by relay_body (no TLS on either side, no re-framing).
  virtual bool can_relay_body(io::Stream& upstream) const = 0;
  // Where can_relay_body: the rest of a Content-Length body, `rest` bytes, moved from
  // `upstream` to the client unchanged (io::splice_exact), after whatever is held back and
  // `pieces` (body bytes already read). kUnavailable (a pipe not to be had, bytes of the
  // upstream held in a receive) means nothing was written: the caller sends `pieces` and
  // reads on as usual. `upstream_done` as in splice_exact.
  virtual exec::Task<io::SpliceResult> relay_body(io::Stream& upstream, std::span<const std::string_view> pieces,
                                                  uint64_t rest, io::Clock::duration upstream_timeout,
                                                  FunctionRef<void()> upstream_done) = 0;
  // The response broke before its end: whatever is held back goes out (the status the
  // client sees), and the connection must then be closed, never reused.
  virtual exec::Task<void> abandon() = 0;
  virtual bool head_sent() const = 0;
  // After a complete response: the client connection may serve another request.
  virtual bool reusable() const = 0;
  // A reply stealgate makes itself (errors, 503s).
  virtual exec::Task<bool> send_local(const LocalReply& lr) = 0;
  // A 101 the route allows: relays its head, then bytes both ways until either side ends.
  virtual exec::Task<void> switch_protocols(const http::ResponseHead& resp, io::Stream& upstream,
                                            std::string_view upstream_leftover, RequestContext& ctx) = 0;
};

class Http1Response final : public DownstreamResponse {
 public:
  // `reader` holds the request (its version, method, bytes after it for a tunnel). Before
  // routing there is no `route`: only send_continue and send_local may be used until
  // set_route names the route whose response headers apply.
  Http1Response(io::Stream& client, http::MessageReader& reader, const config::ListenerSection& listener,
                const config::RouteSection* route = nullptr);
  void set_route(const config::RouteSection& route) { route_ = &route; }

  exec::Task<bool> send_continue() override;
  exec::Task<bool> send_interim(const http::ResponseHead& resp) override;
  void start(const http::ResponseHead& resp, bool keep_alive) override;
  exec::Task<std::error_code> send_body(std::span<const std::string_view> pieces, bool done,
                                        const http::HeaderMap& trailers) override;
  bool can_relay_body(io::Stream& upstream) const override {
    return !chunked_ && !client_.is_tls() && !upstream.is_tls();
  }
  exec::Task<io::SpliceResult> relay_body(io::Stream& upstream, std::span<const std::string_view> pieces, uint64_t rest,
                                          io::Clock::duration upstream_timeout,
                                          FunctionRef<void()> upstream_done) override;
  exec::Task<void> abandon() override;
  bool head_sent() const override { return head_sent_; }
  bool reusable() const override { return keep_ && !until_close_; }
  exec::Task<bool> send_local(const LocalReply& lr) override;
  exec::Task<void> switch_protocols(const http::ResponseHead& resp, io::Stream& upstream,
                                    std::string_view upstream_leftover, RequestContext& ctx) override;

 private:
  io::Deadline send_deadline() const { return io::Deadline::after(listener_.send_timeout); }
  io::Stream& client_;
  http::MessageReader& reader_;
  const config::ListenerSection& listener_;
  const config::RouteSection* route_;
  const bool http10_;
  bool sent_continue_ = false;
  // The final response: its head (until sent), how it is framed for the client.
  io::PooledString head_;
  bool head_sent_ = false;
  bool chunked_ = false;     // re-framed as chunks for the client
  bool until_close_ = false;
  bool keep_ = false;
};

// Writes decoded body pieces to `dst`, framed as chunks when `chunked`, after `prefix` (a
// message head not sent yet) and before `suffix` (the last chunk), in gathered writes.
exec::Task<std::error_code> write_body(io::Stream& dst, std::string_view prefix,
                                       std::span<const std::string_view> pieces, bool chunked,
                                       std::string_view suffix, io::Deadline dl);

}  // namespace sg::proxy
