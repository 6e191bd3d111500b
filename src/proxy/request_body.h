// routes[].request_buffering: a request body read before the request is admitted and an
// upstream is picked. A client that sends its body slowly then holds no admission permit
// and no upstream connection meanwhile: a thread-per-connection upstream (gunicorn's sync
// workers, Apache prefork) is otherwise held for as long as the client takes, which is the
// slow-POST attack. nginx buffers request bodies by default for this reason; HAProxy's
// `option http-buffer-request` and Envoy's buffer filter do the same. A body longer than
// the limit streams on from where buffering stopped, as an unbuffered one does.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "config/schema.h"
#include "exec/coro.h"
#include "http/stream.h"
#include "proxy/downstream.h"

namespace sg::proxy {

struct BufferedBody {
  std::string bytes;        // the decoded body bytes read so far
  std::string_view piece;   // `bytes`, as the one piece sent with the request head
  bool done = false;        // the whole body (and its trailers) has been read
  // As the first read of the body (forward.cpp sends it with the head); it stays valid
  // for the whole request, so a replay can send it again.
  http::BodyRead as_read() const {
    return {http::ReadStatus::kOk, {}, std::span<const std::string_view>(&piece, piece.empty() ? 0 : 1), done};
  }
};

struct BufferingResult {
  int status = 0;            // a local reply owed instead (408, 400, 413); 0: none
  bool client_gone = false;  // the client closed or could not be written
};

// Reads the body of the request `reader` holds into `out`, until it is complete or `limit`
// bytes are in (the read that reaches the limit is kept whole), each read within the
// listener's body_timeout. An `Expect: 100-continue`
// is answered here (no upstream is asked yet) and taken off the request. `note` says why
// where the result is not a success.
exec::Task<BufferingResult> buffer_request_body(http::MessageReader& reader, DownstreamResponse& response,
                                                const config::ListenerSection& lcfg, std::size_t limit,
                                                BufferedBody& out, std::string& note);

}  // namespace sg::proxy
