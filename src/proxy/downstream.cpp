#include "proxy/downstream.h"

#include <array>
#include <cstring>

#include "http/serialize.h"
#include "proxy/headers.h"

namespace sg::proxy {

namespace {

const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

// Copies bytes one way until EOF, an error or `idle` without traffic. Used for tunnels.
exec::Task<void> pump(io::Stream& from, io::Stream& to, std::chrono::milliseconds idle, uint64_t* bytes) {
  std::array<char, 16 * 1024> buf;
  for (;;) {
    io::IoResult r = co_await from.read_some(buf, io::Deadline::after(idle));
    if (r.ec || r.n == 0) break;
    if (co_await to.write_all(std::string_view(buf.data(), r.n), io::Deadline::after(idle))) break;
    if (bytes != nullptr) *bytes += r.n;
  }
  co_await to.shutdown_write(io::Deadline::after(idle));
}

}  // namespace

namespace {

// A body of a few pieces, sent as it is (no chunked coding), with the prefix and suffix
// around it: the common case (a response head and the body that came with it), with a
// frame of a few hundred bytes.
constexpr std::size_t kFewPieces = 8;

exec::Task<std::error_code> write_few(io::Stream& dst, std::string_view prefix,
                                      std::span<const std::string_view> pieces, std::string_view suffix,
                                      io::Deadline dl) {
  std::array<std::string_view, kFewPieces + 2> bufs;
  std::size_t n = 0;
  if (!prefix.empty()) bufs[n++] = prefix;
  for (std::string_view p : pieces) {
    if (!p.empty()) bufs[n++] = p;
  }
  if (!suffix.empty()) bufs[n++] = suffix;
  if (n == 0) co_return std::error_code{};
  co_return co_await dst.write_all(std::span<const std::string_view>(bufs.data(), n), dl);
}

// Any body, in groups of up to 32 pieces per write, each piece framed as a chunk when
// `chunked`.
exec::Task<std::error_code> write_grouped(io::Stream& dst, std::string_view prefix,
                                          std::span<const std::string_view> pieces, bool chunked,
                                          std::string_view suffix, io::Deadline dl) {
  constexpr std::size_t kGroup = 32;
  std::array<std::string_view, kGroup * 3 + 2> bufs;
  std::array<std::array<char, 20>, kGroup> size_lines;
  for (std::size_t i = 0; i == 0 || i < pieces.size(); i += kGroup) {
    std::size_t n = 0;
    if (i == 0 && !prefix.empty()) bufs[n++] = prefix;
    for (std::size_t k = i; k < pieces.size() && k < i + kGroup; ++k) {
      std::string_view p = pieces[k];
      if (p.empty()) continue;
      if (chunked) {
        std::string line;
        http::append_chunk_size(line, p.size());
        auto& sl = size_lines[k - i];
        std::memcpy(sl.data(), line.data(), line.size());
        bufs[n++] = std::string_view(sl.data(), line.size());
        bufs[n++] = p;
        bufs[n++] = "\r\n";
      } else {
        bufs[n++] = p;
      }
    }
    if (i + kGroup >= pieces.size() && !suffix.empty()) bufs[n++] = suffix;
    if (n == 0) continue;
    if (auto ec = co_await dst.write_all(std::span<const std::string_view>(bufs.data(), n), dl)) co_return ec;
  }
  co_return std::error_code{};
}

}  // namespace

exec::Task<std::error_code> write_body(io::Stream& dst, std::string_view prefix,
                                       std::span<const std::string_view> pieces, bool chunked,
                                       std::string_view suffix, io::Deadline dl) {
  if (!chunked && pieces.size() <= kFewPieces) return write_few(dst, prefix, pieces, suffix, dl);
  return write_grouped(dst, prefix, pieces, chunked, suffix, dl);
}

Http1Response::Http1Response(io::Stream& client, http::MessageReader& reader, const config::ListenerSection& listener,
                             const config::RouteSection* route)
    : client_(client),
      reader_(reader),
      listener_(listener),
      route_(route),
      http10_(reader.parser().request().is_http10()) {}

exec::Task<bool> Http1Response::send_continue() {
  if (sent_continue_) co_return true;
  sent_continue_ = true;
  co_return !co_await client_.write_all(kContinue, send_deadline());
}

exec::Task<bool> Http1Response::send_interim(const http::ResponseHead& resp) {
  // HTTP/1.0 clients get no 1xx (RFC 9110 §15.2); a 100 after our own would be a second.
  if (http10_ || (resp.status == 100 && sent_continue_)) co_return true;
  std::string h;
  http::HeaderMap fields = resp.headers;
  strip_hop_by_hop(fields);
  http::append_response_head(h, 1, resp.status, resp.reason, fields);
  co_return !co_await client_.write_all(h, send_deadline());
}

void Http1Response::start(const http::ResponseHead& resp, bool keep_alive) {
  const bool bodiless = resp.body == http::BodyKind::kNone;
  const bool chunked_up = resp.body == http::BodyKind::kChunked;
  until_close_ = resp.body == http::BodyKind::kUntilClose;
  // Re-framed for the client: chunked stays chunked for 1.1; a close-delimited body is
  // chunked for 1.1 clients and close-delimited for 1.0 ones.
  chunked_ = !bodiless && !http10_ && (chunked_up || until_close_);
  keep_ = keep_alive && !http10_;
  head_.str().clear();
  append_client_response_head(head_.str(), resp, resp.reason.empty() ? http::reason_phrase(resp.status) : resp.reason,
                              route_, chunked_, !keep_, /*upgrade=*/false);
}

exec::Task<std::error_code> Http1Response::send_body(std::span<const std::string_view> pieces, bool done,
                                                     const http::HeaderMap& trailers) {
  std::string tail;
  // (Only a chunked upstream body has trailers: a close-delimited one leaves them empty.)
  if (done && chunked_) tail = last_chunk(trailers, route_ != nullptr ? &route_->response_headers : nullptr);
  // The head leaves with whatever body arrived with it; a body still on its way never
  // holds the head back (streaming responses).
  if (head_sent_ && pieces.empty() && tail.empty()) co_return std::error_code{};
  const std::string_view head = head_sent_ ? std::string_view{} : head_.str();
  std::error_code ec = co_await write_body(client_, head, pieces, chunked_, tail, send_deadline());
  if (!ec) head_sent_ = true;
  co_return ec;
}

exec::Task<io::SpliceResult> Http1Response::relay_body(io::Stream& upstream, std::span<const std::string_view> pieces,
                                                       uint64_t rest, io::Clock::duration upstream_timeout,
                                                       FunctionRef<void()> upstream_done) {
  const io::SpliceResult unavailable{io::SpliceResult::Failed::kUnavailable, {}, false, 0};
  if (!can_relay_body(upstream) || pieces.size() > kFewPieces) co_return unavailable;
  std::array<std::string_view, kFewPieces + 1> prefix;
  std::size_t n = 0;
  if (!head_sent_) prefix[n++] = head_.str();
  for (std::string_view p : pieces) {
    if (!p.empty()) prefix[n++] = p;
  }
  io::SpliceResult r = co_await io::splice_exact(upstream.tcp(), client_.tcp(), std::span(prefix.data(), n), rest,
                                                 {upstream_timeout, listener_.send_timeout}, upstream_done);
  if (r.prefix_sent) head_sent_ = true;
  co_return r;
}

exec::Task<void> Http1Response::abandon() {
  keep_ = false;
  if (!head_sent_ && !head_.str().empty()) (void)co_await client_.write_all(head_.str(), send_deadline());
}

exec::Task<bool> Http1Response::send_local(const LocalReply& lr) {
  std::string bytes = render_local_reply(lr);
  co_return !co_await client_.write_all(bytes, send_deadline());
}

exec::Task<void> Http1Response::switch_protocols(const http::ResponseHead& resp, io::Stream& upstream,
                                                 std::string_view upstream_leftover, RequestContext& ctx) {
  keep_ = false;
  std::string head;
  append_client_response_head(head, resp, resp.reason.empty() ? http::reason_phrase(resp.status) : resp.reason,
                              route_, /*chunked_to_client=*/false, /*close=*/false, /*upgrade=*/true);
  if (co_await client_.write_all(head, send_deadline())) {
    ctx.status = 0;
    ctx.note = "client write failed";
    co_return;
  }
  head_sent_ = true;
  const auto idle = listener_.idle_timeout;
  std::string_view client_leftover = reader_.buffered();
  if (!upstream_leftover.empty() && co_await client_.write_all(upstream_leftover, io::Deadline::after(idle))) co_return;
  if (!client_leftover.empty() && co_await upstream.write_all(client_leftover, io::Deadline::after(idle))) co_return;
  // One direction in its own task, the other here; the second to finish ends the tunnel.
  auto upstream_bound =
      exec::spawn(pump(client_, upstream, idle, &ctx.bytes_in), {exec::TaskKind::kRequest, "upgrade tunnel"});
  co_await pump(upstream, client_, idle, &ctx.bytes_out);
  co_await upstream_bound;
}

}  // namespace sg::proxy
