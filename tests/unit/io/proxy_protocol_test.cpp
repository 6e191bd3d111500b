// The PROXY protocol header (io/proxy_protocol.h): versions 1 and 2 parsed to the client's
// address, every kind of malformed or foreign start refused, a header still arriving told
// apart from a bad one; and read from a real socket on both drivers, taking exactly the
// header's bytes however they arrive, so what follows it is the next read's.
#include "io/proxy_protocol.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "io/runtime.h"
#include "../../support/io_drivers.h"
#include "../../support/workers.h"

namespace sg::io {
namespace {

using namespace std::chrono_literals;
using Status = ProxyHeader::Status;
using sg::testing::workers;

std::string v2(unsigned char ver_cmd, unsigned char family, const std::string& body) {
  std::string h("\r\n\r\n\0\r\nQUIT\n", 12);
  h += static_cast<char>(ver_cmd);
  h += static_cast<char>(family);
  h += static_cast<char>(body.size() >> 8);
  h += static_cast<char>(body.size() & 0xff);
  return h + body;
}

std::string v2_tcp4(const std::string& tlvs = "") {
  // 203.0.113.7:51234 -> 127.0.0.1:80
  return v2(0x21, 0x11, std::string("\xcb\x00\x71\x07\x7f\x00\x00\x01\xc8\x22\x00\x50", 12) + tlvs);
}

TEST(ProxyHeaderParse, VersionOneGivesTheClient) {
  const std::string h = "PROXY TCP4 203.0.113.7 127.0.0.1 51234 80\r\n";
  ProxyHeader p = parse_proxy_header(h + "GET / HTTP/1.1\r\n");
  ASSERT_EQ(p.status, Status::kDone) << p.error;
  EXPECT_EQ(p.length, h.size());
  EXPECT_EQ(p.source->address().to_string(), "203.0.113.7");
  EXPECT_EQ(p.source->port(), 51234);
  p = parse_proxy_header("PROXY TCP6 2001:db8::7 ::1 51234 443\r\n");
  ASSERT_EQ(p.status, Status::kDone) << p.error;
  EXPECT_EQ(p.source->address().to_string(), "2001:db8::7");
  p = parse_proxy_header("PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n");
  ASSERT_EQ(p.status, Status::kDone);
  EXPECT_FALSE(p.source.has_value()) << "UNKNOWN: the TCP peer stays the client";
}

TEST(ProxyHeaderParse, VersionTwoGivesTheClientAndSkipsItsTlvs) {
  const std::string tlv("\x04\x00\x03" "abc", 6);  // a TLV (type 4: NOOP), skipped
  ProxyHeader p = parse_proxy_header(v2_tcp4(tlv) + "\x16\x03\x01");
  ASSERT_EQ(p.status, Status::kDone) << p.error;
  EXPECT_EQ(p.length, 16u + 12 + 6);
  EXPECT_EQ(p.source->address().to_string(), "203.0.113.7");
  EXPECT_EQ(p.source->port(), 51234);
  std::string six(36, '\0');
  six[0] = '\x20', six[1] = '\x01', six[2] = '\x0d', six[3] = '\xb8', six[15] = '\x07';  // 2001:db8::7
  six[32] = '\x01', six[33] = '\xbb';                                                    // port 443
  p = parse_proxy_header(v2(0x21, 0x21, six));
  ASSERT_EQ(p.status, Status::kDone) << p.error;
  EXPECT_EQ(p.source->address().to_string(), "2001:db8::7");
  EXPECT_EQ(p.source->port(), 443);
  p = parse_proxy_header(v2(0x20, 0x00, ""));  // LOCAL: the balancer's own health check
  ASSERT_EQ(p.status, Status::kDone);
  EXPECT_FALSE(p.source.has_value());
}

TEST(ProxyHeaderParse, AnIncompleteHeaderAsksForMoreAtEveryLength) {
  for (const std::string& whole : {std::string("PROXY TCP4 203.0.113.7 127.0.0.1 51234 80\r\n"), v2_tcp4()}) {
    for (std::size_t n = 0; n < whole.size(); ++n) {
      EXPECT_EQ(parse_proxy_header(whole.substr(0, n)).status, Status::kNeedMore) << n;
    }
    EXPECT_EQ(parse_proxy_header(whole).status, Status::kDone);
  }
}

TEST(ProxyHeaderParse, MalformedAndForeignStartsAreRefused) {
  for (const std::string& bad : {
           std::string("GET / HTTP/1.1\r\n"),                           // no header at all
           std::string("\x16\x03\x01\x02\x00", 5),                      // a TLS ClientHello
           std::string("PROXY TCP4 203.0.113.7 127.0.0.1 51234\r\n"),   // a field short
           std::string("PROXY TCP4 2001:db8::7 127.0.0.1 1 80\r\n"),    // the wrong family
           std::string("PROXY TCP4 203.0.113.7 127.0.0.1 65536 80\r\n"),
           std::string("PROXY TCP4 203.0.113.7 127.0.0.1 080 80\r\n"),  // a leading zero
           std::string("PROXY TCP4 203.0.113.7 127.0.0.1 1 80\n"),      // no CR
           std::string("PROXY TCP4  203.0.113.7 127.0.0.1 1 80\r\n"),   // two spaces
           std::string("PROXY UDP4 203.0.113.7 127.0.0.1 1 80\r\n"),
           "PROXY TCP4 " + std::string(120, '1') + "\r\n",              // over 107 bytes
           v2(0x11, 0x11, std::string(12, '\0')),                       // version 1 in a v2 signature
           v2(0x22, 0x11, std::string(12, '\0')),                       // an unknown command
           v2(0x21, 0x11, std::string(8, '\0')),                        // too short for IPv4
           v2(0x21, 0x21, std::string(20, '\0')),                       // too short for IPv6
           v2(0x21, 0x11, std::string(5000, '\0')),                     // too long
       }) {
    ProxyHeader p = parse_proxy_header(bad);
    EXPECT_EQ(p.status, Status::kInvalid) << bad;
    EXPECT_FALSE(p.error.empty());
  }
}

class ProxyHeaderRead : public ::testing::TestWithParam<IoDriverKind> {};
INSTANTIATE_TEST_SUITE_P(Drivers, ProxyHeaderRead, sg::testing::kDrivers, sg::testing::driver_test_name);

struct Outcome {
  ProxyHeader header;
  std::string after;  // what the next read returned
};

// Sends `pieces` from the peer with a pause between them, reads the header, then the
// bytes after it.
Outcome read_after(Runtime& rt, std::vector<std::string> pieces, std::size_t after_bytes) {
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  TcpStream stream(Socket::adopt(rt.context(), sv[0]));
  auto h = rt.spawn([&]() -> exec::Task<Outcome> {
    Outcome o;
    o.header = co_await read_proxy_header(stream, Deadline::after(2s));
    if (o.header.status != Status::kDone) co_return o;
    std::string buf(after_bytes, '\0');
    while (o.after.size() < after_bytes) {
      IoResult r = co_await stream.read_some(std::span<char>(buf.data(), after_bytes - o.after.size()),
                                             Deadline::after(2s));
      if (r.ec || r.n == 0) break;
      o.after.append(buf.data(), r.n);
    }
    co_return o;
  });
  for (const std::string& piece : pieces) {
    EXPECT_EQ(::send(sv[1], piece.data(), piece.size(), 0), static_cast<ssize_t>(piece.size()));
    std::this_thread::sleep_for(30ms);
  }
  Outcome o = h.wait().value_or(Outcome{});
  ::close(sv[1]);
  return o;
}

TEST_P(ProxyHeaderRead, TakesExactlyTheHeaderWhetherItComesWholeOrInPieces) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  const std::string v1 = "PROXY TCP4 203.0.113.7 127.0.0.1 51234 80\r\n";
  const std::string request = "GET / HTTP/1.1\r\nHost: h\r\n\r\n";
  Outcome whole = read_after(rt, {v1 + request}, request.size());
  ASSERT_EQ(whole.header.status, Status::kDone) << whole.header.error;
  EXPECT_EQ(whole.header.source->address().to_string(), "203.0.113.7");
  EXPECT_EQ(whole.after, request);
  Outcome split = read_after(rt, {v1.substr(0, 9), v1.substr(9, 20), v1.substr(29) + request}, request.size());
  ASSERT_EQ(split.header.status, Status::kDone) << split.header.error;
  EXPECT_EQ(split.after, request);
  const std::string hello("\x16\x03\x01\x00\x05hello", 10);
  Outcome binary = read_after(rt, {v2_tcp4().substr(0, 14), v2_tcp4().substr(14) + hello}, hello.size());
  ASSERT_EQ(binary.header.status, Status::kDone) << binary.header.error;
  EXPECT_EQ(binary.after, hello);
}

TEST_P(ProxyHeaderRead, AMissingOrLateHeaderIsRefused) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  Outcome plain = read_after(rt, {"GET / HTTP/1.1\r\n\r\n"}, 0);
  EXPECT_EQ(plain.header.status, Status::kInvalid);
  EXPECT_EQ(plain.header.error, "the connection did not start with a PROXY protocol header");
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  TcpStream stream(Socket::adopt(rt.context(), sv[0]));
  ::send(sv[1], "PROXY TCP4 ", 11, 0);  // and nothing more
  auto h = rt.spawn(
      [&]() -> exec::Task<ProxyHeader> { co_return co_await read_proxy_header(stream, Deadline::after(100ms)); });
  ProxyHeader late = h.wait().value_or(ProxyHeader{});
  EXPECT_EQ(late.status, Status::kInvalid);
  EXPECT_EQ(late.error, "no PROXY protocol header in time");
  ::close(sv[1]);
}

}  // namespace
}  // namespace sg::io
