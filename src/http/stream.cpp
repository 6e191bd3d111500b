#include "http/stream.h"

#include <algorithm>
#include <cstring>

namespace sg::http {

namespace {
constexpr std::size_t kMinBuffer = 16 * 1024;
}

MessageReader::MessageReader(io::TcpStream& s, Parser::Mode mode, const ParserLimits& limits)
    : s_(s),
      parser_(mode, limits),
      // A whole head always fits, so the parser's limits (431/414) trigger before the
      // buffer fills.
      cap_(std::max(kMinBuffer, limits.max_header_bytes + limits.max_target_bytes + 4096)) {
  buf_ = std::make_unique<char[]>(cap_);
}

bool MessageReader::make_room() {
  if (end_ < cap_) return true;
  if (begin_ == 0) return false;
  std::memmove(buf_.get(), buf_.get() + begin_, end_ - begin_);
  end_ -= begin_;
  begin_ = 0;
  return true;
}

exec::Task<HeadRead> MessageReader::read_head(io::Deadline first_byte, io::Clock::duration head_timeout,
                                              io::TcpStream* watch) {
  bool partial = begin_ < end_;
  io::Deadline dl = partial ? io::Deadline::after(head_timeout) : first_byte;
  for (;;) {
    if (begin_ < end_) {
      ParseResult r = parser_.feed(buf_.get() + begin_, end_ - begin_);
      begin_ += r.consumed;
      if (r.event == ParseEvent::kError) co_return HeadRead{ReadStatus::kParseError, {}, true};
      if (r.event == ParseEvent::kHeadDone) co_return HeadRead{ReadStatus::kOk, {}, true};
      // The previous (bodiless) message completed just now; the rest of the buffer is
      // the next message: parse on.
      if (r.event == ParseEvent::kMessageDone) continue;
      // kNeedMore: read more.
    }
    if (begin_ == end_) begin_ = end_ = 0;
    if (!make_room()) co_return HeadRead{ReadStatus::kParseError, {}, true};  // unreachable given cap_
    if (watch != nullptr) {
      io::EitherReadable w = co_await s_.wait_either_readable(*watch, dl);
      if (w.ec) {
        co_return HeadRead{w.ec == std::errc::timed_out ? ReadStatus::kTimeout : ReadStatus::kIoError, w.ec, partial};
      }
      if (w.which == 1) {
        if (watch->peer_closed()) co_return HeadRead{ReadStatus::kPeerGone, {}, partial};
        watch = nullptr;  // pipelined bytes, not a close: stop watching
        continue;
      }
    }
    io::IoResult rr = co_await s_.read_some(std::span<char>(buf_.get() + end_, cap_ - end_), dl);
    if (rr.ec) {
      ReadStatus st = rr.ec == std::errc::timed_out ? ReadStatus::kTimeout
                      : partial                     ? ReadStatus::kIoError
                                                    : ReadStatus::kClosed;
      co_return HeadRead{st, rr.ec, partial};
    }
    if (rr.n == 0) {
      co_return HeadRead{partial ? ReadStatus::kIoError : ReadStatus::kClosed, {}, partial};
    }
    end_ += rr.n;
    if (!partial) {
      partial = true;
      dl = io::Deadline::after(head_timeout);
    }
  }
}

exec::Task<BodyRead> MessageReader::read_body(io::Deadline dl) {
  for (;;) {
    // Feed even with nothing buffered: a message without a body completes that way.
    ParseResult r = parser_.feed(buf_.get() + begin_, end_ - begin_);
    begin_ += r.consumed;
    if (r.event == ParseEvent::kError) co_return BodyRead{ReadStatus::kParseError, {}, {}, false};
    chunks_.assign(parser_.body().begin(), parser_.body().end());
    bool done = r.event == ParseEvent::kMessageDone;
    if (!chunks_.empty() || done) co_return BodyRead{ReadStatus::kOk, {}, chunks_, done};
    // Everything buffered was consumed without body bytes: read more.
    begin_ = end_ = 0;
    io::IoResult rr = co_await s_.read_some(std::span<char>(buf_.get(), cap_), dl);
    if (rr.ec) {
      co_return BodyRead{rr.ec == std::errc::timed_out ? ReadStatus::kTimeout : ReadStatus::kIoError, rr.ec, {}, false};
    }
    if (rr.n == 0) {
      ParseResult f = parser_.finish();
      if (f.event == ParseEvent::kMessageDone) co_return BodyRead{ReadStatus::kOk, {}, {}, true};
      co_return BodyRead{ReadStatus::kIoError, {}, {}, false};
    }
    end_ = rr.n;
  }
}

}  // namespace sg::http
