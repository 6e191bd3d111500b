#include "proxy/request_body.h"

#include <algorithm>

namespace sg::proxy {

exec::Task<BufferingResult> buffer_request_body(http::MessageReader& reader, DownstreamResponse& response,
                                                const config::ListenerSection& lcfg, std::size_t limit,
                                                BufferedBody& out, std::string& note) {
  http::RequestHead& req = reader.parser().request();
  if (req.expect_continue) {
    // The client waits for a 100 before it sends the body; no upstream is asked for one.
    if (!co_await response.send_continue()) {
      note = "client closed before the request body";
      co_return BufferingResult{0, true};
    }
    req.expect_continue = false;
  }
  if (req.body == http::BodyKind::kContentLength) {
    out.bytes.reserve(static_cast<std::size_t>(std::min<uint64_t>(req.content_length, limit)));
  }
  reader.top_up(req.body);
  http::BodyRead br = reader.buffered_body();
  for (;;) {
    if (br.status == http::ReadStatus::kTimeout) {
      note = "client body timeout";
      co_return BufferingResult{408, false};
    }
    if (br.status == http::ReadStatus::kParseError) {
      const int st = reader.parser().error_status();
      note = "bad request body: " + reader.parser().error_detail();
      co_return BufferingResult{st != 0 ? st : 400, false};
    }
    if (br.status != http::ReadStatus::kOk) {
      note = "client closed during the request body";
      co_return BufferingResult{0, true};
    }
    for (std::string_view c : br.chunks) out.bytes.append(c);
    if (br.done || out.bytes.size() >= limit) break;
    br = co_await reader.read_body(io::Deadline::after(lcfg.body_timeout));
  }
  out.done = br.done;
  out.piece = out.bytes;
  co_return BufferingResult{};
}

}  // namespace sg::proxy
