#include "http/stream.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "exec/reclaim.h"
#include "common/thread_cache.h"

namespace sg::http {

namespace {
constexpr std::size_t kInitialBuffer = 4 * 1024;  // a typical message head
// Per read while a body streams: as much as nginx takes with its default proxy buffers
// (one readv into 8 x 8 KiB). Relaying a 64 KiB response in 16 KiB reads cost four recvs
// and four sends (and the client four wake-ups) per response: 115-130 us of proxy CPU
// per GET 64 KiB against 78-94 us in 64 KiB reads, 7.7-8.6k req/s against 9.8-11.4k.
constexpr std::size_t kBodyBuffer = 64 * 1024;
constexpr std::size_t kMinCap = kBodyBuffer;

// Read buffers of the two common sizes are recycled per thread (common/thread_cache.h): a
// keep-alive connection gives its buffer back at every idle wait, and without a cache each
// request would malloc and free 4-64 KiB (glibc serves those from its locked bins, not
// tcache). None are kept under ASan, so that a use after free stays detectable.
void delete_buffer(void* p) noexcept { delete[] static_cast<char*>(p); }
#if defined(__SANITIZE_ADDRESS__)
constexpr std::size_t kKeepSmall = 0, kKeepBody = 0;
#else
constexpr std::size_t kKeepSmall = 64, kKeepBody = 16;  // 256 KiB and 1 MiB
#endif
using SmallBuffers = PerThreadCache<struct SmallBuffersTag, kKeepSmall, delete_buffer>;
using BodyBuffers = PerThreadCache<struct BodyBuffersTag, kKeepBody, delete_buffer>;

char* get_buffer(std::size_t n) {
  void* kept = n == kInitialBuffer ? SmallBuffers::take() : n == kBodyBuffer ? BodyBuffers::take() : nullptr;
  return kept != nullptr ? static_cast<char*>(kept) : new char[n];  // uninitialised: only what was read is looked at
}

void put_buffer(char* p, std::size_t n) {
  const bool kept = n == kInitialBuffer ? SmallBuffers::keep(p) : n == kBodyBuffer && BodyBuffers::keep(p);
  if (!kept) delete[] p;
}

// An idle worker frees this thread's cached read buffers and parsers (exec/reclaim.h).
std::size_t reclaim_readers() noexcept {
  return SmallBuffers::clear() * kInitialBuffer + BodyBuffers::clear() * kBodyBuffer + release_cached_parsers();
}
const bool kReadersReclaimable = (exec::add_idle_reclaimer(&reclaim_readers), true);
}  // namespace

MessageReader::MessageReader(io::Stream& s, Parser::Mode mode, const ParserLimits& limits)
    : s_(s),
      parser_(acquire_parser(mode, limits)),
      // A whole head always fits, so the parser's limits (431/414) trigger before the
      // buffer fills.
      cap_(std::max(kMinCap, limits.max_header_bytes + limits.max_target_bytes + 4096)) {}

bool MessageReader::make_room() {
  if (buf_ == nullptr) {
    reserve_empty(kInitialBuffer);
    return true;
  }
  if (end_ < size_) return true;
  if (begin_ > 0) {
    std::memmove(buf_, buf_ + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
    return true;
  }
  if (size_ >= cap_) return false;
  move_to_buffer(std::min(cap_, size_ * 2));
  return true;
}

void MessageReader::move_to_buffer(std::size_t n) {
  const std::size_t have = end_ - begin_;
  char* bigger = get_buffer(n);
  std::memcpy(bigger, buf_ + begin_, have);
  put_buffer(buf_, size_);
  buf_ = bigger;
  size_ = n;
  begin_ = 0;
  end_ = have;
}

void MessageReader::reserve_empty(std::size_t n) {
  begin_ = end_ = 0;
  if (size_ >= n) return;
  if (buf_ != nullptr) put_buffer(buf_, size_);
  buf_ = get_buffer(n);
  size_ = n;
}

void MessageReader::release_buffer() {
  if (buf_ != nullptr) put_buffer(buf_, size_);
  buf_ = nullptr;
  size_ = 0;
  begin_ = end_ = 0;
}

exec::Task<HeadRead> MessageReader::read_head(io::Deadline first_byte, io::Clock::duration head_timeout,
                                              io::Stream* watch, bool wait_first) {
  bool partial = begin_ < end_;
  io::Deadline dl = partial ? io::Deadline::after(head_timeout) : first_byte;
  bool readable = false;  // the last wait reported the peer readable: read, don't wait
  for (;;) {
    if (begin_ < end_ && !readable) {  // (just woken: nothing new to parse yet)
      ParseResult r = parser_->feed(buf_ + begin_, end_ - begin_);
      begin_ += r.consumed;
      if (r.event == ParseEvent::kError) co_return HeadRead{ReadStatus::kParseError, {}, true};
      if (r.event == ParseEvent::kHeadDone) co_return HeadRead{ReadStatus::kOk, {}, true};
      // The previous (bodiless) message completed just now; the rest of the buffer is
      // the next message: parse on.
      if (r.event == ParseEvent::kMessageDone) continue;
      // kNeedMore: read more.
    }
    io::IoResult rr;
    bool wait = false;
    if (begin_ == end_) {
      // Nothing buffered: look with a small buffer; if the peer has nothing for us yet,
      // give the buffer back while we wait (idle keep-alive connections hold none).
      std::optional<io::IoResult> got;
      if (!wait_first || readable) {
        reserve_empty(kInitialBuffer);
        got = s_.try_read(std::span<char>(buf_, size_));
      }
      wait_first = false;
      if (got) {
        rr = *got;
        co_await exec::coop_checkpoint();
      } else {
        release_buffer();
        wait = true;
      }
    } else {
      if (!make_room()) co_return HeadRead{ReadStatus::kParseError, {}, true};  // unreachable given cap_
      if (watch != nullptr && !readable) {
        wait = true;  // wait for the peer or for the watched stream's close
      } else {
        rr = co_await s_.read_some(std::span<char>(buf_ + end_, size_ - end_), dl);
      }
    }
    readable = false;
    if (wait) {
      // The one wait of this loop (one awaiter in the frame, whichever path waits).
      io::EitherReadable w = co_await s_.wait_readable(watch, dl);
      if (w.ec) {
        co_return HeadRead{w.ec == std::errc::timed_out ? ReadStatus::kTimeout : ReadStatus::kIoError, w.ec, partial};
      }
      if (w.which == 1) {
        // A receive that found no free buffer brought nothing (io::Stream::woke_with_input):
        // watch on. Otherwise a close, or pipelined bytes: stop watching.
        if (watch->woke_with_input()) {
          if (watch->peer_closed()) co_return HeadRead{ReadStatus::kPeerGone, {}, partial};
          watch = nullptr;
        }
      } else {
        readable = true;
      }
      continue;
    }
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

void MessageReader::top_up(BodyKind body) {
  if (body != BodyKind::kContentLength && body != BodyKind::kChunked) return;
  if (buf_ == nullptr || end_ < size_ || size_ >= kBodyBuffer) return;
  move_to_buffer(kBodyBuffer);
  if (auto got = s_.try_read(std::span<char>(buf_ + end_, size_ - end_)); got && !got->ec) end_ += got->n;
}

BodyRead MessageReader::buffered_body() {
  // Feed even with nothing buffered: a message without a body completes that way.
  static char nothing[1];
  ParseResult r = parser_->feed(buf_ ? buf_ + begin_ : nothing, end_ - begin_);
  begin_ += r.consumed;
  if (r.event == ParseEvent::kError) return BodyRead{ReadStatus::kParseError, {}, {}, false};
  return BodyRead{ReadStatus::kOk, {}, parser_->body(), r.event == ParseEvent::kMessageDone};
}

bool MessageReader::skip_arrived_body() {
  for (std::size_t taken = 0;;) {
    BodyRead b = buffered_body();
    if (b.status != ReadStatus::kOk) return false;
    if (b.done) return true;
    if (has_buffered() || taken >= kMostSkipped) return false;
    reserve_empty(kBodyBuffer);
    std::optional<io::IoResult> got = s_.try_read(std::span<char>(buf_, size_));
    if (!got || got->ec || got->n == 0) return false;  // nothing more yet, or the client closed
    end_ = got->n;
    taken += got->n;
  }
}

exec::Task<BodyRead> MessageReader::read_body(io::Deadline dl) {
  for (;;) {
    BodyRead b = buffered_body();
    if (b.status != ReadStatus::kOk || !b.chunks.empty() || b.done) co_return b;
    // Everything buffered was consumed without body bytes: read more.
    reserve_empty(kBodyBuffer);
    io::IoResult rr = co_await s_.read_some(std::span<char>(buf_, size_), dl, io::ReadMode::kRestOfMessage);
    if (rr.ec) {
      co_return BodyRead{rr.ec == std::errc::timed_out ? ReadStatus::kTimeout : ReadStatus::kIoError, rr.ec, {}, false};
    }
    if (rr.n == 0) {
      ParseResult f = parser_->finish();
      if (f.event == ParseEvent::kMessageDone) co_return BodyRead{ReadStatus::kOk, {}, {}, true};
      co_return BodyRead{ReadStatus::kIoError, {}, {}, false};
    }
    end_ = rr.n;
  }
}

}  // namespace sg::http
