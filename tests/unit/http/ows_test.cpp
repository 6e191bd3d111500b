// OWS (RFC 9110 §5.6.3: SP and HTAB) around every field value that decides framing,
// routing or connection handling: the value must mean the same with HTAB as with SP or
// nothing. Each case is parsed with "", " ", "\t", " \t" and "\t " on both sides.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "http/parser.h"

namespace sg::http {
namespace {

const std::vector<std::string> kOws = {"", " ", "\t", " \t", "\t "};

struct Head {
  ParseEvent event = ParseEvent::kNeedMore;
  int status = 0;
  RequestHead req;
  std::string body;
  int messages = 0;
};

// Feeds a writable copy of `wire`, at most `step` bytes at a time (1: every byte alone,
// so field names and values are split across feeds).
Head parse_in_steps(const std::string& wire, std::size_t step) {
  std::string buf = wire;
  Parser p(Parser::Mode::kRequest, ParserLimits{});
  Head h;
  std::size_t off = 0, fed = 0;
  for (;;) {
    fed = std::max(fed, std::min(buf.size(), off + step));
    ParseResult r = p.feed(buf.data() + off, fed - off);
    for (auto v : p.body()) h.body.append(v);
    off += r.consumed;
    h.event = r.event;
    if (r.event == ParseEvent::kError) {
      h.status = p.error_status();
      return h;
    }
    if (r.event == ParseEvent::kHeadDone && h.messages == 0) h.req = p.request();
    if (r.event == ParseEvent::kMessageDone) ++h.messages;
    if (r.event == ParseEvent::kNeedMore && fed == buf.size()) return h;
    if (r.event == ParseEvent::kMessageDone && off == buf.size()) return h;
  }
}

// Whole, then byte by byte: both must give the same verdict.
Head parse(const std::string& wire) {
  Head whole = parse_in_steps(wire, wire.size());
  Head bytewise = parse_in_steps(wire, 1);
  EXPECT_EQ(whole.status, bytewise.status) << wire;
  EXPECT_EQ(whole.body, bytewise.body) << wire;
  EXPECT_EQ(whole.req.body, bytewise.req.body) << wire;
  return whole;
}

std::string with_ows(const std::string& name, const std::string& value, const std::string& l, const std::string& r) {
  return name + ":" + l + value + r + "\r\n";
}

TEST(Ows, TransferEncodingChunked) {
  for (const auto& l : kOws) {
    for (const auto& r : kOws) {
      Head h = parse("POST / HTTP/1.1\r\nHost: a\r\n" + with_ows("Transfer-Encoding", "chunked", l, r) +
                     "\r\n5\r\nhello\r\n0\r\n\r\n");
      EXPECT_NE(h.event, ParseEvent::kError) << "[" << l << "][" << r << "] status " << h.status;
      EXPECT_EQ(h.req.body, BodyKind::kChunked) << "[" << l << "][" << r << "]";
      EXPECT_EQ(h.body, "hello") << "[" << l << "][" << r << "]";
      EXPECT_EQ(h.messages, 1);
    }
  }
}

TEST(Ows, TransferEncodingList) {
  for (const auto& l : kOws) {
    // "gzip<OWS>,<OWS>chunked": a coding we do not implement before chunked is 501.
    Head h = parse("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip" + l + "," + l + "chunked\r\n\r\n0\r\n\r\n");
    EXPECT_EQ(h.status, 501) << "[" << l << "]";
    // "chunked<OWS>,<OWS>gzip": not ending in chunked is 400.
    h = parse("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked" + l + "," + l + "gzip\r\n\r\n0\r\n\r\n");
    EXPECT_EQ(h.status, 400) << "[" << l << "]";
  }
}

TEST(Ows, ContentLength) {
  for (const auto& l : kOws) {
    for (const auto& r : kOws) {
      Head h = parse("POST / HTTP/1.1\r\nHost: a\r\n" + with_ows("Content-Length", "5", l, r) + "\r\nhello");
      EXPECT_NE(h.event, ParseEvent::kError) << "[" << l << "][" << r << "] status " << h.status;
      EXPECT_EQ(h.req.body, BodyKind::kContentLength);
      EXPECT_EQ(h.req.content_length, 5u);
      EXPECT_EQ(h.body, "hello");
    }
  }
}

TEST(Ows, ContentLengthWithInnerWhitespaceIsRefused) {
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\t2\r\n\r\n").status, 400);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n\r\n").status, 400);
}

TEST(Ows, ConnectionClose) {
  for (const auto& l : kOws) {
    for (const auto& r : kOws) {
      Head h = parse("GET / HTTP/1.1\r\nHost: a\r\n" + with_ows("Connection", "close", l, r) + "\r\n");
      ASSERT_EQ(h.event, ParseEvent::kMessageDone) << "[" << l << "][" << r << "] status " << h.status;
      EXPECT_FALSE(h.req.keep_alive) << "[" << l << "][" << r << "]";
      h = parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: x-a" + l + "," + r + "close\r\n\r\n");
      EXPECT_FALSE(h.req.keep_alive) << "[" << l << "][" << r << "]";
      h = parse("GET / HTTP/1.0\r\nHost: a\r\n" + with_ows("Connection", "keep-alive", l, r) + "\r\n");
      EXPECT_TRUE(h.req.keep_alive) << "[" << l << "][" << r << "]";
    }
  }
}

TEST(Ows, UpgradeAndConnectionUpgrade) {
  for (const auto& l : kOws) {
    for (const auto& r : kOws) {
      Head h = parse("GET / HTTP/1.1\r\nHost: a\r\n" + with_ows("Connection", "upgrade", l, r) +
                     with_ows("Upgrade", "websocket", l, r) + "\r\n");
      ASSERT_NE(h.event, ParseEvent::kError) << "[" << l << "][" << r << "]";
      EXPECT_TRUE(h.req.upgrade) << "[" << l << "][" << r << "]";
      ASSERT_NE(h.req.headers.get("upgrade"), nullptr);
      EXPECT_EQ(*h.req.headers.get("upgrade"), "websocket");  // stored without OWS
    }
  }
}

TEST(Ows, HostAndExpect) {
  for (const auto& l : kOws) {
    for (const auto& r : kOws) {
      Head h = parse("GET / HTTP/1.1\r\n" + with_ows("Host", "api.example.com", l, r) + "\r\n");
      ASSERT_NE(h.event, ParseEvent::kError) << "[" << l << "][" << r << "]";
      EXPECT_EQ(h.req.authority, "api.example.com");
      h = parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n" + with_ows("Expect", "100-continue", l, r) +
                "\r\nx");
      EXPECT_NE(h.event, ParseEvent::kError) << "[" << l << "][" << r << "] status " << h.status;
      EXPECT_TRUE(h.req.expect_continue) << "[" << l << "][" << r << "]";
    }
  }
}

TEST(Ows, ArbitraryFieldValuesAreStoredTrimmed) {
  // Route header matchers compare the stored value: it must not carry OWS.
  for (const auto& l : kOws) {
    for (const auto& r : kOws) {
      Head h = parse("GET / HTTP/1.1\r\nHost: a\r\n" + with_ows("X-Env", "prod", l, r) + "\r\n");
      ASSERT_NE(h.req.headers.get("x-env"), nullptr);
      EXPECT_EQ(*h.req.headers.get("x-env"), "prod") << "[" << l << "][" << r << "]";
    }
  }
}

TEST(Ows, DefaultLimitsTakeWhatNginxAndHaproxyForward) {
  // About a hundred application fields on top of the usual ones.
  std::string wire = "GET / HTTP/1.1\r\nHost: a\r\nUser-Agent: t\r\nAccept: */*\r\nCookie: a=b\r\n";
  for (int i = 0; i < 120; ++i) wire += "X-App-" + std::to_string(i) + ": value-" + std::to_string(i) + "\r\n";
  wire += "\r\n";
  Head h = parse(wire);
  EXPECT_EQ(h.event, ParseEvent::kMessageDone) << h.status;
  // An 8 KiB request-target plus the rest of its request line.
  std::string target = "/" + std::string(8 * 1024 - 1, 'a');
  h = parse("GET " + target + " HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_EQ(h.event, ParseEvent::kMessageDone) << h.status;
}

}  // namespace
}  // namespace sg::http
