// HTTP/1.x message parser: llhttp (strict mode) plus the checks llhttp leaves to us, with
// size limits. Requests that are malformed or ambiguous get a precise status (400, 413,
// 414, 431, 501, 505) and must be answered and the connection closed; nothing ambiguous
// is ever handed on. Responses that are malformed map to 502.
//
// feed() stops at the end of a message head (so the caller can route before any body is
// processed) and at the end of a message (so pipelined messages are handled one at a
// time); decoded body bytes come out as views into the fed buffer, valid until the caller
// reuses that memory.
#pragma once

#include <llhttp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "http/message.h"

namespace sg::http {

struct ParserLimits {
  std::size_t max_target_bytes = 16 * 1024;   // request-target; over it: 414
  std::size_t max_header_bytes = 32 * 1024;   // header section (and trailer section); 431
  std::size_t max_headers = 256;              // field lines; 431
  uint64_t max_body_bytes = 0;                // 0 = unlimited; over it: 413
  std::size_t max_chunk_ext_bytes = 4 * 1024; // chunk extensions per chunk; 400
};

enum class ParseEvent : uint8_t {
  kNeedMore,     // everything fed was consumed; more bytes needed
  kHeadDone,     // a message head is complete (request()/response() valid)
  kMessageDone,  // the message (body and trailers included) is complete
  kError,        // malformed; see error_status()/error_detail()
};

struct ParseResult {
  std::size_t consumed = 0;
  ParseEvent event = ParseEvent::kNeedMore;
};

class Parser;

// Gives a parser back to the releasing thread's cache (or frees it).
struct ParserRecycler {
  void operator()(Parser* p) const noexcept;
};
using ParserPtr = std::unique_ptr<Parser, ParserRecycler>;

namespace detail {

// The parser's per-message scalars, apart from its containers so that one assignment puts
// every one of them back to its initial value (Parser::renew). A scalar added to the
// parser belongs here; a container, in Parser and in renew's list.
struct ParserScalars {
  // Head lexer state (persists across feeds while a head is incomplete).
  enum class Lex : uint8_t { kStart, kStartLine, kLineStart, kFieldName, kInLine, kCr, kEndCr, kDone };
  Lex lex_ = Lex::kStart;
  bool lex_seen_field_line_ = false;
  char field_name_[18] = {};   // a field name split across reads (long enough for ours)
  std::size_t field_name_len_ = 0;
  bool framing_value_ = false;  // in a Content-Length / Transfer-Encoding value
  char start_line_tail_[8] = {};  // the last 8 bytes of the start line, in order
  char start_line_head_[40] = {}; // first bytes of the start line (the method, for requests)
  std::size_t start_line_len_ = 0;
  bool prev_was_space_ = false;
  bool version_syntax_ok_ = true;

  bool in_trailers_ = false;
  bool in_message_ = false;
  bool head_done_ = false;
  bool paused_ = false;
  bool no_body_ = false;
  std::size_t header_bytes_ = 0;
  std::size_t chunk_ext_bytes_ = 0;
  uint64_t body_total_ = 0;
  int error_status_ = 0;
  ParseEvent pause_event_ = ParseEvent::kNeedMore;
};
static_assert(std::is_trivially_copyable_v<ParserScalars>);

// A header name or value as llhttp hands it over: almost always one span of the bytes
// being parsed, kept as a view until the field line is stored (one copy, into the header
// map, instead of two). A second span (the line was split across reads), or the end of a
// feed() with the line unfinished (the reader's buffer may move before the next one),
// copies what there is into `text`.
struct HeaderPiece {
  std::string_view view;  // the only span so far, in the bytes being parsed
  std::string text;       // the spans so far, once copied

  void add(const char* at, std::size_t n) {
    if (view.empty() && text.empty()) {
      view = {at, n};
      return;
    }
    settle();
    text.append(at, n);
  }
  void settle() {
    if (view.empty()) return;
    text.assign(view);
    view = {};
  }
  std::string_view get() const { return view.empty() ? std::string_view(text) : view; }
  void clear() {
    view = {};
    text.clear();
  }
};

}  // namespace detail

class Parser : private detail::ParserScalars {
 public:
  enum class Mode : uint8_t { kRequest, kResponse };

  Parser(Mode mode, const ParserLimits& limits);
  Parser(const Parser&) = delete;
  Parser& operator=(const Parser&) = delete;

  // `data` is writable: the head lexer folds HTAB to SP inside Content-Length and
  // Transfer-Encoding values (OWS either way, RFC 9110 §5.6.3), which llhttp would
  // otherwise refuse after the value.
  ParseResult feed(char* data, std::size_t len);
  // Feeds a copy (body views then point into the parser's own copy, valid until the next
  // feed): for callers holding read-only bytes.
  ParseResult feed(std::string_view s) {
    copy_.assign(s);
    return feed(copy_.data(), copy_.size());
  }
  // The peer closed: completes a close-delimited response body; an error if a message was
  // in progress otherwise.
  ParseResult finish();

  // Decoded body bytes produced by the last feed() (views into the fed buffer).
  const std::vector<std::string_view>& body() const { return body_; }
  uint64_t body_bytes_total() const { return body_total_; }

  RequestHead& request() { return req_; }
  ResponseHead& response() { return resp_; }
  const HeaderMap& trailers() const { return trailers_; }
  bool in_message() const { return in_message_; }
  bool head_done() const { return head_done_; }

  // After kHeadDone of an Upgrade request that will not be switched (the route does not
  // allow the protocol, or the upstream answered with a final response): the connection
  // carries on as HTTP/1.1, so llhttp must not treat what follows as another protocol.
  void refuse_upgrade() {
    req_.upgrade = false;
    parser_.upgrade = 0;
  }

  // For responses: the next response answers a HEAD request (no body, whatever it says).
  void expect_no_body(bool v) { no_body_ = v; }

  int error_status() const { return error_status_; }
  const std::string& error_detail() const { return error_detail_; }

 private:
  static int on_message_begin(llhttp_t*);
  static int on_url(llhttp_t*, const char*, std::size_t);
  static int on_status(llhttp_t*, const char*, std::size_t);
  static int on_header_field(llhttp_t*, const char*, std::size_t);
  static int on_header_value(llhttp_t*, const char*, std::size_t);
  static int on_header_value_complete(llhttp_t*);
  static int on_headers_complete(llhttp_t*);
  static int on_body(llhttp_t*, const char*, std::size_t);
  static int on_chunk_header(llhttp_t*);
  static int on_chunk_extension(llhttp_t*, const char*, std::size_t);
  static int on_message_complete(llhttp_t*);

  int fail(int status, std::string detail);
  int finish_request_head();
  // Its parts, each 0 or fail()'s status: Host and the request-target (RFC 9112 §3.2), the
  // body framing (§6), and keep-alive, Expect and Upgrade.
  int read_request_authority();
  int read_absolute_form(std::string_view target);
  static void split_path_and_query(std::string_view pq, RequestHead& r);
  int read_request_framing();
  int read_connection_options();
  int finish_response_head();
  bool count_header_bytes(std::size_t n);
  void map_llhttp_error(llhttp_errno_t err, const char* data, std::size_t len);

  // The head lexer (http/head_lexer.cpp). Scans head bytes before llhttp sees them, for
  // what llhttp 8 tolerates: bare LF line ends, obs-fold, whitespace before the first
  // field. Returns false on a violation.
  bool lex_head(char* data, std::size_t len);
  // lex_head's longer states, from data[i] on: each moves i to the last byte it consumed
  // and returns a violation's text, or nullptr.
  const char* lex_start_line(const char* data, std::size_t len, std::size_t& i);
  const char* lex_field_name_run(const char* data, std::size_t len, std::size_t& i);
  const char* lex_in_line(char* data, std::size_t len, std::size_t& i);
  const char* lex_field_line(char* data, std::size_t len, std::size_t& i);
  void take_lf(const char* data, std::size_t len, std::size_t& i);
  // The field name seen so far in this read (`complete`: its colon follows).
  void lex_field_name(std::string_view part, bool complete);

  Mode mode_;
  ParserLimits limits_;
  bool version_tail_ok() const;
  static const llhttp_settings_t& settings();
  llhttp_t parser_;

  RequestHead req_;
  ResponseHead resp_;
  HeaderMap trailers_;
  detail::HeaderPiece field_, value_;
  std::vector<std::string_view> body_;
  std::string error_detail_;
  std::string copy_;

  friend ParserPtr acquire_parser(Mode mode, const ParserLimits& limits);
  friend struct ParserRecycler;
  // Puts this parser in the state of a new one for `mode` and `limits`, keeping the
  // capacity of its header lists and scratch strings.
  void renew(Mode mode, const ParserLimits& limits);
  // Whether keeping this parser for reuse would keep more memory than a typical message needs.
  bool oversized() const;
};

// A parser in the state of a new one, from the calling thread's cache when it holds one.
// Cached parsers keep the capacity their header lists and strings grew to, so a
// keep-alive connection holds no parser while idle (it gives its parser back between
// requests) and its next request still parses into warm, already-allocated memory.
ParserPtr acquire_parser(Parser::Mode mode, const ParserLimits& limits);
// Frees the parsers cached on the calling thread (an idle worker's reclaim); returns
// their objects' bytes (not counting what their lists grew to).
std::size_t release_cached_parsers() noexcept;

}  // namespace sg::http
