// Shared types of one request's life (session.cpp drives it, forward.cpp talks upstream).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "config/schema.h"
#include "exec/semaphore.h"
#include "http/stream.h"
#include "io/stream.h"
#include "proxy/gateway.h"
#include "proxy/headers.h"

namespace sg::proxy {

struct RequestContext {
  std::chrono::steady_clock::time_point start;
  RequestId request_id;
  // The connection's peer (session.cpp's Peer, which outlives its requests): views, so
  // that an address longer than std::string keeps inline costs no malloc per request.
  std::string_view peer_ip;  // what X-Forwarded-For gets appended
  // The client: the peer, or behind listeners[].trusted_proxies the address their
  // X-Forwarded-For names (in `forwarded_client`). What routes, rate limits and the access
  // log see.
  std::string_view client_ip;
  std::string_view client;  // ip:port, or the forwarded client's ip
  std::string forwarded_client;
  const io::TlsSummary* tls = nullptr;  // the client connection's TLS; null when plain
  // The connection's local address as "ip:port" where the listener knows it (bound to one
  // address: ListenerState::local_authority); empty: the socket is asked when needed.
  std::string_view local_authority;
  std::string route = "-";
  int route_index = -1;       // index in the snapshot's route table, -1 = none matched
  std::string cluster = "-";
  std::string endpoint = "-";
  int status = 0;             // status sent to the client; 0 = none (client gone/aborted)
  uint64_t bytes_out = 0;     // response body bytes sent to the client
  uint64_t bytes_in = 0;      // request body bytes read from the client
  int attempts = 0;
  std::string note;           // why stealgate answered itself / aborted
};

class DownstreamResponse;  // proxy/downstream.h
struct BufferedBody;       // proxy/request_body.h

// Everything forward() needs about the downstream side.
struct Downstream {
  io::Stream& client;
  http::MessageReader& reader;  // the request head is parsed; its body is unread but for `buffered`
  DownstreamResponse& response;  // where the response goes, framed for the client's protocol
  const config::ListenerSection& listener;
  bool draining = false;
  // The request's admission permits (global, route, cluster). Given back once the upstream
  // exchange is over (its response read to the end, or a local reply about to be sent),
  // before the last write to the client: a client that has its response may already send
  // the next request, and with writes completing asynchronously (io_uring) that request
  // could otherwise find the permit still held.
  std::span<exec::Semaphore::Permit> permits;
  // The body read before admission (routes[].request_buffering); null: none was.
  const BufferedBody* buffered = nullptr;
  void release_admission() {
    for (exec::Semaphore::Permit& p : permits) p.reset();
  }
};

struct ForwardResult {
  bool client_reusable = false;  // the downstream connection can serve another request
};

exec::Task<ForwardResult> forward(Gateway& gw, const Snapshot& snap, const routing::CompiledRoute& route,
                                  Downstream& down, RequestContext& ctx);

}  // namespace sg::proxy
