// Parser tests: valid messages, and a malformed-input corpus from RFC 9110/9112 rules
// (../shared/HTTP.md) with the exact status each must produce.
#include "http/parser.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace sg::http {
namespace {

struct Parsed {
  ParseEvent last = ParseEvent::kNeedMore;
  int status = 0;
  std::string body;
  int messages = 0;
};

// Feeds `wire` in pieces of `step` bytes; stops at the first error or after all input.
Parsed parse_request(const std::string& wire, std::size_t step = 1 << 20, ParserLimits limits = {}) {
  Parser p(Parser::Mode::kRequest, limits);
  Parsed out;
  std::size_t off = 0;
  while (off < wire.size()) {
    std::size_t n = std::min(step, wire.size() - off);
    std::size_t used = 0;
    while (used < n) {
      ParseResult r = p.feed(std::string_view(wire.data() + off + used, n - used));
      for (auto v : p.body()) out.body.append(v);
      used += r.consumed;
      out.last = r.event;
      if (r.event == ParseEvent::kError) {
        out.status = p.error_status();
        return out;
      }
      if (r.event == ParseEvent::kMessageDone) ++out.messages;
      if (r.event == ParseEvent::kNeedMore) break;
    }
    off += n;
  }
  return out;
}

TEST(RequestParser, SimpleGetSplitsPathAndQuery) {
  Parser p(Parser::Mode::kRequest, {});
  std::string wire = "GET /a/b?x=1&y=2 HTTP/1.1\r\nHost: example.com\r\nX-A: 1\r\n\r\n";
  ParseResult r = p.feed(wire);
  ASSERT_EQ(r.event, ParseEvent::kHeadDone);
  EXPECT_EQ(p.request().method, "GET");
  EXPECT_EQ(p.request().path, "/a/b");
  EXPECT_EQ(p.request().query, "x=1&y=2");
  EXPECT_EQ(p.request().authority, "example.com");
  EXPECT_EQ(p.request().body, BodyKind::kNone);
  EXPECT_TRUE(p.request().keep_alive);
  r = p.feed(wire.data() + r.consumed, wire.size() - r.consumed);
  EXPECT_EQ(r.event, ParseEvent::kMessageDone);
}

TEST(RequestParser, ContentLengthBodyAcrossFeeds) {
  std::string wire = "POST /u HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\nhello world";
  for (std::size_t step : {1, 3, 7, 1000}) {
    Parsed out = parse_request(wire, step);
    EXPECT_EQ(out.messages, 1) << step;
    EXPECT_EQ(out.body, "hello world") << step;
  }
}

TEST(RequestParser, ChunkedBodyWithExtensionsAndTrailers) {
  std::string wire =
      "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Checksum: abc\r\n\r\n";
  Parser p(Parser::Mode::kRequest, {});
  std::string body;
  std::size_t off = 0;
  int done = 0;
  while (off < wire.size()) {
    ParseResult r = p.feed(wire.data() + off, wire.size() - off);
    for (auto v : p.body()) body.append(v);
    off += r.consumed;
    ASSERT_NE(r.event, ParseEvent::kError) << p.error_detail();
    if (r.event == ParseEvent::kHeadDone) {
      EXPECT_EQ(p.request().body, BodyKind::kChunked);
    }
    if (r.event == ParseEvent::kMessageDone) ++done;
    if (r.event == ParseEvent::kNeedMore) break;
  }
  EXPECT_EQ(done, 1);
  EXPECT_EQ(body, "hello world");
  ASSERT_NE(p.trailers().get("x-checksum"), nullptr);
  EXPECT_EQ(*p.trailers().get("x-checksum"), "abc");
}

TEST(RequestParser, PipelinedRequestsStopAtEachMessage) {
  std::string wire = "GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n";
  Parser p(Parser::Mode::kRequest, {});
  std::vector<std::string> paths;
  std::size_t off = 0;
  while (off < wire.size()) {
    ParseResult r = p.feed(wire.data() + off, wire.size() - off);
    off += r.consumed;
    if (r.event == ParseEvent::kHeadDone) paths.push_back(p.request().path);
    if (r.event == ParseEvent::kNeedMore) break;
  }
  EXPECT_EQ(paths, (std::vector<std::string>{"/1", "/2"}));
}

TEST(RequestParser, AbsoluteFormUsesTargetAuthority) {
  Parser p(Parser::Mode::kRequest, {});
  ParseResult r = p.feed("GET http://api.example.com:8080/v1?q HTTP/1.1\r\nHost: other\r\n\r\n");
  ASSERT_EQ(r.event, ParseEvent::kHeadDone);
  EXPECT_EQ(p.request().authority, "api.example.com:8080");
  EXPECT_EQ(*p.request().headers.get("host"), "api.example.com:8080");
  EXPECT_EQ(p.request().path, "/v1");
  EXPECT_EQ(p.request().query, "q");
}

TEST(RequestParser, Http10WithoutHostIsNotPersistent) {
  Parser p(Parser::Mode::kRequest, {});
  ASSERT_EQ(p.feed("GET / HTTP/1.0\r\n\r\n").event, ParseEvent::kHeadDone);
  EXPECT_TRUE(p.request().is_http10());
  EXPECT_FALSE(p.request().keep_alive);
}

TEST(RequestParser, ExpectAndUpgradeAreRecognised) {
  Parser p(Parser::Mode::kRequest, {});
  ASSERT_EQ(p.feed("POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n").event,
            ParseEvent::kHeadDone);
  EXPECT_TRUE(p.request().expect_continue);
  Parser q(Parser::Mode::kRequest, {});
  ASSERT_EQ(q.feed("GET /ws HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n").event,
            ParseEvent::kHeadDone);
  EXPECT_TRUE(q.request().upgrade);
}

struct BadCase {
  const char* rule;
  std::string wire;
  int status;
};

class MalformedRequest : public ::testing::TestWithParam<BadCase> {};

TEST_P(MalformedRequest, IsRejectedWithTheRightStatus) {
  const BadCase& c = GetParam();
  ParserLimits limits;
  limits.max_target_bytes = 64;
  limits.max_header_bytes = 512;
  limits.max_headers = 8;
  limits.max_body_bytes = 16;
  for (std::size_t step : {std::size_t{1} << 20, std::size_t{1}}) {
    Parsed out = parse_request(c.wire, step, limits);
    EXPECT_EQ(out.last, ParseEvent::kError) << c.rule << " (step " << step << ")";
    EXPECT_EQ(out.status, c.status) << c.rule << " (step " << step << ")";
  }
}

const std::string H = "Host: h\r\n";
INSTANTIATE_TEST_SUITE_P(
    Corpus, MalformedRequest,
    ::testing::Values(
        BadCase{"CL with TE (9112 6.1)", "POST / HTTP/1.1\r\n" + H + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        BadCase{"TE with CL (order swapped)", "POST / HTTP/1.1\r\n" + H + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", 400},
        BadCase{"differing CL lines", "POST / HTTP/1.1\r\n" + H + "Content-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400},
        BadCase{"identical CL lines", "POST / HTTP/1.1\r\n" + H + "Content-Length: 2\r\nContent-Length: 2\r\n\r\nab", 400},
        BadCase{"TRACE", "TRACE / HTTP/1.1\r\n" + H + "\r\n", 501},
        BadCase{"fragment in origin-form", "GET /a#b HTTP/1.1\r\n" + H + "\r\n", 400},
        BadCase{"fragment in absolute-form", "GET http://h/a?q#b HTTP/1.1\r\n" + H + "\r\n", 400},
        BadCase{"CL list", "POST / HTTP/1.1\r\n" + H + "Content-Length: 1, 2\r\n\r\nab", 400},
        BadCase{"CL plus sign", "POST / HTTP/1.1\r\n" + H + "Content-Length: +1\r\n\r\na", 400},
        BadCase{"CL negative", "POST / HTTP/1.1\r\n" + H + "Content-Length: -1\r\n\r\n", 400},
        BadCase{"CL hex", "POST / HTTP/1.1\r\n" + H + "Content-Length: 0x10\r\n\r\n", 400},
        BadCase{"CL empty", "POST / HTTP/1.1\r\n" + H + "Content-Length: \r\n\r\n", 400},
        BadCase{"CL overflow", "POST / HTTP/1.1\r\n" + H + "Content-Length: 99999999999999999999999\r\n\r\n", 400},
        BadCase{"TE final not chunked", "POST / HTTP/1.1\r\n" + H + "Transfer-Encoding: gzip\r\n\r\n", 400},
        BadCase{"TE unknown coding before chunked", "POST / HTTP/1.1\r\n" + H + "Transfer-Encoding: gzip, chunked\r\n\r\n", 501},
        BadCase{"TE twice", "POST / HTTP/1.1\r\n" + H + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        BadCase{"TE on HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        BadCase{"chunked with parameter", "POST / HTTP/1.1\r\n" + H + "Transfer-Encoding: chunked;q=1\r\n\r\n", 400},
        BadCase{"bad chunk size", "POST / HTTP/1.1\r\n" + H + "Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
        BadCase{"chunk size overflow", "POST / HTTP/1.1\r\n" + H + "Transfer-Encoding: chunked\r\n\r\nfffffffffffffffffffff\r\n", 400},
        BadCase{"bare LF in chunked framing", "POST / HTTP/1.1\r\n" + H + "Transfer-Encoding: chunked\r\n\r\n3\nabc\n0\n\n", 400},
        BadCase{"chunk extensions too long", "POST / HTTP/1.1\r\n" + H + "Transfer-Encoding: chunked\r\n\r\n1;" + std::string(5000, 'e') + "\r\na\r\n", 400},
        BadCase{"obs-fold (9112 5.2)", "GET / HTTP/1.1\r\n" + H + "X-A: a\r\n  b\r\n\r\n", 400},
        BadCase{"space before colon (9112 5.1)", "GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400},
        BadCase{"NUL in value", std::string("GET / HTTP/1.1\r\n") + H + "X-A: a" + std::string(1, '\0') + "b\r\n\r\n", 400},
        BadCase{"NUL deep in a long value", std::string("GET / HTTP/1.1\r\n") + H + "X-A: " + std::string(20, 'a') + std::string(1, '\0') + "b\r\n\r\n", 400},
        BadCase{"NUL in a trailer value", std::string("POST / HTTP/1.1\r\n") + H + "Transfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-T: a" + std::string(1, '\0') + "b\r\n\r\n", 400},
        BadCase{"bare CR in value", "GET / HTTP/1.1\r\n" + H + "X-A: a\rb\r\n\r\n", 400},
        BadCase{"bare LF line ending", "GET / HTTP/1.1\n" + H + "\n", 400},
        BadCase{"invalid field name", "GET / HTTP/1.1\r\n" + H + "X(A): 1\r\n\r\n", 400},
        BadCase{"missing Host on 1.1 (9112 3.2)", "GET / HTTP/1.1\r\nX-A: 1\r\n\r\n", 400},
        BadCase{"two Host lines", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
        BadCase{"invalid Host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400},
        BadCase{"Host with userinfo", "GET / HTTP/1.1\r\nHost: u@h\r\n\r\n", 400},
        BadCase{"unsupported major version", "GET / HTTP/2.0\r\n" + H + "\r\n", 505},
        BadCase{"HTTP/3", "GET / HTTP/3.0\r\n" + H + "\r\n", 505},
        BadCase{"malformed version", "GET / HTTP/1.x\r\n" + H + "\r\n", 400},
        BadCase{"double space in request line", "GET  / HTTP/1.1\r\n" + H + "\r\n", 400},
        BadCase{"target too long (9112 3)", "GET /" + std::string(100, 'a') + " HTTP/1.1\r\n" + H + "\r\n", 414},
        BadCase{"header section too large", "GET / HTTP/1.1\r\n" + H + "X-A: " + std::string(600, 'v') + "\r\n\r\n", 431},
        BadCase{"too many fields", "GET / HTTP/1.1\r\n" + H + "A: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\nF: 1\r\nG: 1\r\nI: 1\r\n\r\n", 431},
        BadCase{"CL body over limit", "POST / HTTP/1.1\r\n" + H + "Content-Length: 17\r\n\r\n", 413},
        BadCase{"chunked body over limit", "POST / HTTP/1.1\r\n" + H + "Transfer-Encoding: chunked\r\n\r\n11\r\n" + std::string(17, 'x') + "\r\n", 413},
        BadCase{"unknown method token", "FROB / HTTP/1.1\r\n" + H + "\r\n", 501},
        BadCase{"garbage request line", "\x01\x02\x03 / HTTP/1.1\r\n" + H + "\r\n", 400},
        BadCase{"CONNECT not supported", "CONNECT h:443 HTTP/1.1\r\n" + H + "\r\n", 501},
        BadCase{"asterisk-form with GET", "GET * HTTP/1.1\r\n" + H + "\r\n", 400},
        BadCase{"relative target", "GET a/b HTTP/1.1\r\n" + H + "\r\n", 400},
        BadCase{"unsupported expectation", "GET / HTTP/1.1\r\n" + H + "Expect: teapot\r\n\r\n", 417},
        BadCase{"whitespace before first header", "GET / HTTP/1.1\r\n X-A: 1\r\n" + H + "\r\n", 400}));

Parsed parse_response(const std::string& wire, bool head = false, bool eof = false) {
  Parser p(Parser::Mode::kResponse, {});
  p.expect_no_body(head);
  Parsed out;
  std::size_t off = 0;
  for (;;) {
    ParseResult r;
    if (off < wire.size() || out.last == ParseEvent::kHeadDone) {
      // After a head, feed again even with no bytes left: a bodiless message completes.
      r = p.feed(std::string_view(wire.data() + off, wire.size() - off));
    } else if (eof) {
      r = p.finish();
      eof = false;
    } else {
      return out;
    }
    for (auto v : p.body()) out.body.append(v);
    off += r.consumed;
    out.last = r.event;
    if (r.event == ParseEvent::kError) {
      out.status = p.error_status();
      return out;
    }
    if (r.event == ParseEvent::kHeadDone) out.status = p.response().status;
    if (r.event == ParseEvent::kMessageDone) ++out.messages;
    if (r.event == ParseEvent::kNeedMore && off < wire.size()) return out;
    if (r.event == ParseEvent::kNeedMore && !eof) return out;
  }
}

TEST(ResponseParser, FramingVariants) {
  EXPECT_EQ(parse_response("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").body, "ok");
  EXPECT_EQ(parse_response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n").body, "ok");
  Parsed until_close = parse_response("HTTP/1.1 200 OK\r\n\r\nstream until close", false, true);
  EXPECT_EQ(until_close.body, "stream until close");
  EXPECT_EQ(until_close.messages, 1);
  Parsed head = parse_response("HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n", true);
  EXPECT_EQ(head.messages, 1);
  EXPECT_EQ(head.body, "");
  EXPECT_EQ(parse_response("HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n").messages, 1);
  Parsed cont = parse_response("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx");
  EXPECT_EQ(cont.messages, 2);
  EXPECT_EQ(cont.body, "x");
  // Found by fuzz_response: an interim response with Transfer-Encoding has no body either
  // (llhttp read everything after it, the final response included, as its body until close).
  Parsed hints = parse_response(
      "HTTP/1.1 103 Early Hints\r\nTransfer-Encoding: x\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  EXPECT_EQ(hints.messages, 2);
  EXPECT_EQ(hints.body, "ok");
}

TEST(ResponseParser, EmptyFeedsProduceNoBodySpans) {
  // Regression: llhttp reports a zero-length on_body for read-until-close bodies when fed
  // zero bytes; a reader loop would spin on that "chunk" forever.
  Parser p(Parser::Mode::kResponse, {});
  std::string wire = "HTTP/1.1 200 OK\r\n\r\nabc";
  ParseResult r = p.feed(wire);
  ASSERT_EQ(r.event, ParseEvent::kHeadDone);
  r = p.feed(wire.data() + r.consumed, wire.size() - r.consumed);
  ASSERT_EQ(p.body().size(), 1u);
  for (int i = 0; i < 3; ++i) {
    r = p.feed(wire.data() + wire.size(), 0);
    EXPECT_EQ(r.event, ParseEvent::kNeedMore);
    EXPECT_TRUE(p.body().empty());
  }
  EXPECT_EQ(p.finish().event, ParseEvent::kMessageDone);
}

TEST(ResponseParser, MalformedUpstreamResponsesAre502) {
  EXPECT_EQ(parse_response("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab").status, 502);
  EXPECT_EQ(parse_response("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n").status, 502);
  EXPECT_EQ(parse_response("garbage\r\n\r\n").status, 502);
  for (const char* status : {"099", "600", "999"}) {
    EXPECT_EQ(parse_response(std::string("HTTP/1.1 ") + status + " X\r\nContent-Length: 0\r\n\r\n").status, 502)
        << status;
  }
  EXPECT_EQ(parse_response("HTTP/1.1 599 X\r\nContent-Length: 0\r\n\r\n").messages, 1);
  // A coding other than chunked would reach the client without its name (we re-frame).
  for (const char* te : {"gzip", "gzip, chunked", "chunked, gzip", "chunked, chunked"}) {
    EXPECT_EQ(parse_response(std::string("HTTP/1.1 200 OK\r\nTransfer-Encoding: ") + te + "\r\n\r\n0\r\n\r\n").status,
              502)
        << te;
  }
  EXPECT_EQ(parse_response("HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked \r\n\r\n2\r\nok\r\n0\r\n\r\n").body, "ok");
  EXPECT_EQ(parse_response("HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: gzip\r\n\r\n").messages, 1);
  EXPECT_EQ(parse_response("HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n").status, 502);
  Parsed truncated = parse_response("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", false, true);
  EXPECT_EQ(truncated.last, ParseEvent::kError);
  EXPECT_EQ(truncated.status, 502);
}

// Parsers are recycled through a per-thread cache (acquire_parser): whatever state a parser
// was left in (an error, half a head, a chunked body, the other mode, tighter limits), the
// next taker must see a new parser; only the memory is reused.
TEST(ParserCache, ARecycledParserIsIndistinguishableFromANewOne) {
  const std::string get = "GET /x?q=1 HTTP/1.1\r\nHost: a.example\r\nX-One: 1\r\n\r\n";
  Parser* first = nullptr;
  {
    ParserLimits tight;
    tight.max_headers = 1;
    ParserPtr p = acquire_parser(Parser::Mode::kResponse, tight);
    first = p.get();
    // A response parser, failed on a malformed head.
    EXPECT_EQ(p->feed(std::string_view("HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\n\r\n")).event, ParseEvent::kError);
    EXPECT_NE(p->error_status(), 0);
  }
  {
    ParserPtr p = acquire_parser(Parser::Mode::kRequest, {});
    ASSERT_EQ(p.get(), first);  // the same memory, from this thread's cache
    EXPECT_EQ(p->error_status(), 0);
    EXPECT_FALSE(p->in_message());
    ParseResult r = p->feed(get);
    ASSERT_EQ(r.event, ParseEvent::kHeadDone);  // limits and mode are the new ones
    EXPECT_EQ(p->request().path, "/x");
    EXPECT_EQ(p->request().authority, "a.example");
    EXPECT_EQ(p->request().headers.size(), 2u);
    // Left in the middle of a chunked body.
    ParserPtr q = acquire_parser(Parser::Mode::kRequest, {});
    EXPECT_EQ(q->feed(std::string_view("POST / HTTP/1.1\r\nHost: b\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab")).event,
              ParseEvent::kHeadDone);
    q.reset();
    // And one left with half a head.
    p.reset();
    ParserPtr half = acquire_parser(Parser::Mode::kRequest, {});
    EXPECT_EQ(half->feed(std::string_view("GET /half HTTP/1.1\r\nHo")).event, ParseEvent::kNeedMore);
  }
  for (int i = 0; i < 3; ++i) {
    ParserPtr p = acquire_parser(Parser::Mode::kRequest, {});
    EXPECT_FALSE(p->in_message());
    EXPECT_TRUE(p->request().headers.empty());
    EXPECT_TRUE(p->body().empty());
    std::string wire = get;
    ParseResult r = p->feed(wire.data(), wire.size());
    ASSERT_EQ(r.event, ParseEvent::kHeadDone) << "taker " << i;
    EXPECT_EQ(p->request().method, "GET");
    EXPECT_EQ(p->request().body, BodyKind::kNone);
    EXPECT_EQ(p->feed(wire.data() + r.consumed, wire.size() - r.consumed).event, ParseEvent::kMessageDone);
  }
}

TEST(ParserCache, AParserThatGrewLargeIsNotKept) {
  std::string big = "GET / HTTP/1.1\r\nHost: a\r\n";
  for (int i = 0; i < 100; ++i) big += "X-" + std::to_string(i) + ": v\r\n";
  big += "\r\n";
  {
    ParserPtr p = acquire_parser(Parser::Mode::kRequest, {});
    ASSERT_EQ(p->feed(big).event, ParseEvent::kHeadDone);
    ASSERT_GT(p->request().headers.capacity(), 64u);
  }
  // Whatever the cache hands out now (its parser address may be reused by a new one), it
  // is not holding a 100-field header list.
  ParserPtr p = acquire_parser(Parser::Mode::kRequest, {});
  ParserPtr q = acquire_parser(Parser::Mode::kRequest, {});
  EXPECT_LE(p->request().headers.capacity(), 64u);
  EXPECT_LE(q->request().headers.capacity(), 64u);
}

}  // namespace
}  // namespace sg::http

namespace sg::http {
namespace {

// Header names and values are kept as views of the bytes being parsed until their line is
// stored (detail::HeaderPiece): a line split across feeds must be copied before the
// reader's buffer is reused. Each piece is fed from one scratch buffer that is
// overwritten before the next feed, at every step size, and the fields and trailers
// must come out as from one feed.
struct Fields {
  std::vector<std::pair<std::string, std::string>> headers, trailers;
  std::string body;
  ParseEvent last = ParseEvent::kNeedMore;
};

Fields parse_through_scratch(const std::string& wire, std::size_t step) {
  Parser p(Parser::Mode::kRequest, ParserLimits{});
  Fields out;
  std::string scratch;
  std::size_t off = 0;
  while (off < wire.size() && out.last != ParseEvent::kMessageDone && out.last != ParseEvent::kError) {
    scratch.assign(wire, off, std::min(step, wire.size() - off));
    std::size_t used = 0;
    while (used < scratch.size()) {
      ParseResult r = p.feed(scratch.data() + used, scratch.size() - used);
      for (auto v : p.body()) out.body.append(v);
      used += r.consumed;
      out.last = r.event;
      if (r.event == ParseEvent::kHeadDone) {
        for (const auto& h : p.request().headers) out.headers.emplace_back(h.name, h.value);
      }
      if (r.event == ParseEvent::kMessageDone) {
        for (const auto& h : p.trailers()) out.trailers.emplace_back(h.name, h.value);
      }
      if (r.event == ParseEvent::kNeedMore || r.event == ParseEvent::kError || r.event == ParseEvent::kMessageDone) break;
    }
    off += scratch.size();
    std::fill(scratch.begin(), scratch.end(), 'X');  // what a view left behind would now show
  }
  return out;
}

TEST(RequestParser, FieldsSplitAcrossFeedsSurviveTheBufferBeingReused) {
  const std::string wire =
      "POST /upload HTTP/1.1\r\nHost: example.test\r\nUser-Agent: a fairly long user agent string/1.0\r\n"
      "X-Empty:\r\nAccept:  text/plain ,  */*  \r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n"
      "5\r\nhello\r\n0\r\nX-Checksum: 0123456789abcdef\r\nX-More: tail value\r\n\r\n";
  const Fields whole = parse_through_scratch(wire, wire.size());
  ASSERT_EQ(whole.last, ParseEvent::kMessageDone);
  ASSERT_EQ(whole.headers.size(), 6u);
  EXPECT_EQ(whole.headers[1], (std::pair<std::string, std::string>{"User-Agent", "a fairly long user agent string/1.0"}));
  EXPECT_EQ(whole.headers[3], (std::pair<std::string, std::string>{"Accept", "text/plain ,  */*"}));
  ASSERT_EQ(whole.trailers.size(), 2u);
  EXPECT_EQ(whole.trailers[0].second, "0123456789abcdef");
  EXPECT_EQ(whole.body, "hello");
  for (std::size_t step = 1; step < wire.size(); ++step) {
    const Fields split = parse_through_scratch(wire, step);
    EXPECT_EQ(split.last, ParseEvent::kMessageDone) << step;
    EXPECT_EQ(split.headers, whole.headers) << step;
    EXPECT_EQ(split.trailers, whole.trailers) << step;
    EXPECT_EQ(split.body, whole.body) << step;
  }
}

}  // namespace
}  // namespace sg::http
