// Reading HTTP/1.x messages from a TCP stream: a growable buffer, the parser, deadlines.
//
// Memory: the buffer starts small (4 KiB: a typical head), doubles while a head does not
// fit (up to what the parser's limits allow, so 431/414 trigger first), is 64 KiB while a
// body streams, and is given back whenever nothing is buffered and the peer has nothing
// to send yet: an idle keep-alive connection holds no buffer at all (as nginx does).
//
// read_head() returns once a message head is parsed; read_body() then yields decoded
// body bytes in pieces (views into the buffer, valid until the next call on this reader)
// so a body is streamed with bounded memory. Bytes after the current message stay
// buffered for the next one (pipelining) or for a tunnel after an upgrade.
#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <system_error>

#include "exec/coro.h"
#include "http/parser.h"
#include "io/stream.h"

namespace sg::http {

enum class ReadStatus : uint8_t {
  kOk,
  kClosed,      // the peer closed (or reset) before sending any byte of a message
  kTimeout,     // the deadline passed
  kIoError,     // read failed, or the peer closed in the middle of a message
  kParseError,  // malformed; parser().error_status() says how to answer
  kPeerGone,    // the watched stream (see read_head) was closed by its peer
};

struct HeadRead {
  ReadStatus status = ReadStatus::kOk;
  std::error_code ec;
  bool partial = false;  // some bytes of the message had arrived (matters for 408 vs. close)
};

struct BodyRead {
  ReadStatus status = ReadStatus::kOk;
  std::error_code ec;
  // Views of the decoded body bytes in the reader's buffer, listed by the parser: valid
  // until the reader's next read or the reader's end.
  std::span<const std::string_view> chunks;
  bool done = false;  // the message (and its trailers) is complete
};

class MessageReader {
 public:
  MessageReader(io::Stream& s, Parser::Mode mode, const ParserLimits& limits);
  ~MessageReader() { release_buffer(); }
  MessageReader(const MessageReader&) = delete;
  MessageReader& operator=(const MessageReader&) = delete;

  // Reads a message head. With no bytes buffered, waits for the first byte until
  // `first_byte`; once a byte has arrived the whole head must arrive by `head_by`
  // (computed then from `head_timeout`). If `watch` is given, a close of that stream by
  // its peer ends the wait with kPeerGone. `wait_first`: the peer can hardly have sent
  // the head yet (we have just sent it a request, or the previous response), so with
  // nothing buffered it waits for readability before reading, instead of learning that
  // from a read that fails with EAGAIN (one syscall per message saved; a head that is
  // there after all is reported by the wait at once).
  exec::Task<HeadRead> read_head(io::Deadline first_byte, io::Clock::duration head_timeout,
                                 io::Stream* watch = nullptr, bool wait_first = false);

  // Decoded body bytes of the current message; `done` once it is complete.
  exec::Task<BodyRead> read_body(io::Deadline dl);
  // After read_head, before buffered_body(), for a body framed by Content-Length or
  // chunked coding: when the read that completed the head filled the buffer (the peer had
  // more to send), moves the unparsed bytes into a body-sized buffer and reads once more,
  // without waiting, so that a head and a small body that arrived together also leave
  // together (one write on the other side instead of two). Never waits; a failed read is
  // left for read_body to find again (a closed or reset peer stays closed).
  void top_up(BodyKind body);
  // Like read_body, from what is already buffered only (no I/O): the body bytes that
  // arrived with the head, so they can leave in the same write as the head. No chunks
  // and not done means nothing usable is buffered yet; read_body continues from there.
  BodyRead buffered_body();
  // For a reply that needs none of the body (stealgate's own): takes the rest of the
  // current message's body from what is buffered and what the socket holds now, up to
  // kMostSkipped bytes, without waiting. True when the message is complete, so the
  // connection can carry the next one; false when more of it is still to come (or it
  // never will: an `Expect: 100-continue` client waits for a 100), or it is malformed.
  bool skip_arrived_body();
  static constexpr std::size_t kMostSkipped = 64 * 1024;

  Parser& parser() { return *parser_; }
  // Bytes received after the current message.
  std::string_view buffered() const {
    return buf_ ? std::string_view(buf_ + begin_, end_ - begin_) : std::string_view();
  }
  void discard_buffered() { begin_ = end_ = 0; }
  bool has_buffered() const { return end_ > begin_; }

 private:
  // Makes room at the end of the buffer (allocating, compacting or growing it); false if
  // it is at its maximum size and full of unconsumed bytes.
  bool make_room();
  // With nothing buffered: a buffer of at least n bytes (contents not kept).
  void reserve_empty(std::size_t n);
  // The unparsed bytes, moved to the start of a new buffer of n bytes (n > what they need).
  void move_to_buffer(std::size_t n);
  void release_buffer();

  io::Stream& s_;
  ParserPtr parser_;  // from the thread's parser cache, given back with the reader
  char* buf_ = nullptr;   // from the per-thread buffer cache (stream.cpp)
  std::size_t size_ = 0;  // allocated bytes
  std::size_t cap_;       // the most the buffer may grow to
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
};

}  // namespace sg::http
