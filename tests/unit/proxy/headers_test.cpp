// The heads stealgate writes (proxy/headers.h): each line is copied into room made for it
// at the end of the head, so large heads, long lines and empty values must come out byte
// for byte as written line by line; and generated request ids must be well-formed and
// distinct.
#include "proxy/headers.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace sg::proxy {
namespace {

http::RequestHead get_with(std::initializer_list<std::pair<std::string, std::string>> fields) {
  http::RequestHead r;
  r.method = "GET";
  r.target = r.path = "/a";
  r.authority = "h";
  r.headers.add("Host", "h");
  for (const auto& [k, v] : fields) r.headers.add(k, v);
  return r;
}

std::string expected_tail(const std::string& fields) {
  return "GET /a HTTP/1.1\r\nHost: h\r\n" + fields +
         "X-Forwarded-For: 10.0.0.9\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\nVia: 1.1 stealgate\r\n"
         "X-Request-Id: id1\r\n\r\n";
}

TEST(UpstreamRequestHead, ManyFieldsAndALongOneComeOutInOrder) {
  // 40 fields of about 60 bytes and one 3,000-byte value, after a prefix already in the
  // string: every line lands after the one before, none overwrites another.
  http::RequestHead r = get_with({});
  std::string want_fields;
  for (int i = 0; i < 40; ++i) {
    const std::string name = "X-Field-" + std::to_string(i), value = std::string(50, static_cast<char>('a' + i % 26));
    r.headers.add(name, value);
    want_fields += name + ": " + value + "\r\n";
    if (i == 20) {
      r.headers.add("X-Big", std::string(3000, 'z'));
      want_fields += "X-Big: " + std::string(3000, 'z') + "\r\n";
    }
  }
  ForwardInfo info;
  info.peer_ip = "10.0.0.9";
  info.request_id = "id1";
  std::string out = "prefix|";
  append_upstream_request_head(out, r, "/a", nullptr, info);
  EXPECT_EQ(out, "prefix|" + expected_tail(want_fields));
}

TEST(UpstreamRequestHead, ListFieldsJoinTheClientsValuesAndRouteOperationsApply) {
  http::RequestHead r = get_with({{"X-Forwarded-For", "192.0.2.1"}, {"X-Drop", "1"}, {"X-Keep", "2"}});
  config::RouteSection route;
  route.request_headers.remove = {"x-drop"};
  route.request_headers.set = {{"X-Set", "s"}};
  route.request_headers.add = {{"X-Add", "a"}};
  ForwardInfo info;
  info.peer_ip = "10.0.0.9";
  info.request_id = "id1";
  std::string out;
  append_upstream_request_head(out, r, "/a", &route, info);
  EXPECT_EQ(out,
            "GET /a HTTP/1.1\r\nHost: h\r\nX-Keep: 2\r\nX-Forwarded-For: 192.0.2.1, 10.0.0.9\r\n"
            "X-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\nVia: 1.1 stealgate\r\nX-Request-Id: id1\r\n"
            "X-Set: s\r\nX-Add: a\r\n\r\n");
}

TEST(UpstreamRequestHead, FieldsTheConnectionHeaderNamesAreDroppedInAnyCase) {
  // Names in any case and order, beside a protected one (X-Forwarded-For stays ours).
  http::RequestHead r = get_with({{"Connection", "X-b, keep-alive, x-FORWARDED-for,x-A"}, {"x-a", "1"},
                                  {"X-B", "2"}, {"X-Bb", "3"}, {"X-", "4"}, {"X-Forwarded-For", "192.0.2.1"}});
  ForwardInfo info;
  info.peer_ip = "10.0.0.9";
  info.request_id = "id1";
  std::string out;
  append_upstream_request_head(out, r, "/a", nullptr, info);
  EXPECT_EQ(out, "GET /a HTTP/1.1\r\nHost: h\r\nX-Bb: 3\r\nX-: 4\r\nX-Forwarded-For: 192.0.2.1, 10.0.0.9\r\n"
                 "X-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\nVia: 1.1 stealgate\r\nX-Request-Id: id1\r\n\r\n");
  // Thousands of names beside hundreds of fields (the most a 32 KiB head holds): every
  // named field goes, every other stays.
  http::RequestHead big = get_with({});
  std::string named;
  for (int i = 0; i < 4000; ++i) named += (i ? ",N" : "N") + std::to_string(i * 7);
  big.headers.add("Connection", named);
  std::string want;
  for (int i = 0; i < 200; ++i) {
    big.headers.add("n" + std::to_string(i), "v");
    if (i % 7 != 0) want += "n" + std::to_string(i) + ": v\r\n";
  }
  out.clear();
  append_upstream_request_head(out, big, "/a", nullptr, info);
  EXPECT_EQ(out, expected_tail(want));
}

// Empty views may carry a null pointer (a default ForwardInfo field): the head writer must
// not hand it to memcpy, even for zero bytes (UBSan stops the sanitizer run on it; the
// header_rules fuzzer found it with an HTTP/1.0 request without Host).
TEST(UpstreamRequestHead, EmptyValuesFromDefaultViews) {
  http::RequestHead r;
  r.method = "GET";
  r.target = r.path = "/";
  r.version_minor = 0;
  ForwardInfo info;  // every view default: null data
  info.proto = {};
  std::string out;
  append_upstream_request_head(out, r, "/", nullptr, info);
  EXPECT_EQ(out,
            "GET / HTTP/1.1\r\nHost: \r\nX-Forwarded-For: \r\nX-Forwarded-Proto: \r\nVia: 1.0 stealgate\r\n"
            "X-Request-Id: \r\n\r\n");
}

TEST(ClientResponseHead, LongValuesAndTheEmptyLine) {
  http::ResponseHead resp;
  resp.status = 200;
  resp.body = http::BodyKind::kContentLength;
  resp.content_length = 2;
  resp.headers.add("Date", "d");
  resp.headers.add("Set-Cookie", std::string(2000, 'c'));
  resp.headers.add("Content-Length", "2");
  std::string out;
  append_client_response_head(out, resp, "OK", nullptr, false, true, false);
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nDate: d\r\nSet-Cookie: " + std::string(2000, 'c') +
                     "\r\nContent-Length: 2\r\nVia: 1.1 stealgate\r\nConnection: close\r\n\r\n");
}

TEST(LastChunk, OnlyTrailersThatCouldPassUnchangedInAHeadPass) {
  http::HeaderMap trailers;
  for (const char* name : {"X-Sum", "content-length", "Transfer-Encoding", "Host", "Connection", "Trailer", "TE",
                           "X-Forwarded-For", "x-request-id", "Via", "Forwarded", "X-Gone", "X-Set", "X-Who", "Digest"}) {
    trailers.add(name, "v");
  }
  config::HeaderOps ops;
  ops.remove = {"x-gone"};
  ops.set = {{"x-set", "s"}};
  EXPECT_EQ(last_chunk(trailers, &ops, "x-who"), "0\r\nX-Sum: v\r\nDigest: v\r\n\r\n");
  EXPECT_EQ(last_chunk(trailers, nullptr), "0\r\nX-Sum: v\r\nX-Gone: v\r\nX-Set: v\r\nX-Who: v\r\nDigest: v\r\n\r\n");
  EXPECT_EQ(last_chunk({}, &ops, "x-who"), "0\r\n\r\n");
}

TEST(RequestIdTest, GeneratedIdsAreLowercaseHexAndDistinct) {
  http::RequestHead r = get_with({});
  std::set<std::string> seen;
  std::set<char> digits;
  for (int i = 0; i < 10000; ++i) {
    const std::string id(RequestId::for_request(r).view());
    ASSERT_EQ(id.size(), 32u);
    for (char c : id) {
      ASSERT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << id;
      digits.insert(c);
    }
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 10000u);
  EXPECT_EQ(digits.size(), 16u);
}

TEST(RequestIdTest, ASaneSuppliedIdIsKeptAndAnInsaneOneReplaced) {
  http::RequestHead r = get_with({{"X-Request-Id", "abc-123"}});
  EXPECT_EQ(RequestId::for_request(r).view(), "abc-123");
  http::RequestHead bad = get_with({{"X-Request-Id", "has space"}});
  EXPECT_EQ(RequestId::for_request(bad).view().size(), 32u);
  http::RequestHead long_id = get_with({{"X-Request-Id", std::string(129, 'a')}});
  EXPECT_EQ(RequestId::for_request(long_id).view().size(), 32u);
}

}  // namespace
}  // namespace sg::proxy
