// parse_proxy_header (io/proxy_protocol.h): a pure function of the bytes, apart from the
// socket code so that the fuzzer can link it alone (tests/fuzz/fuzz_proxy_header.cpp).
#include "io/proxy_protocol.h"

#include <arpa/inet.h>

#include <array>
#include <charconv>
#include <cstring>
#include <vector>

namespace sg::io {

namespace {

constexpr std::string_view kV1Prefix = "PROXY ";
constexpr std::size_t kV1Most = 107;  // the spec's bound, CRLF included
constexpr std::string_view kV2Signature{"\r\n\r\n\0\r\nQUIT\n", 12};
constexpr std::size_t kV2Fixed = 16;  // signature, version and command, family, length

constexpr auto invalid = &ProxyHeader::invalid;

ProxyHeader done(std::size_t length, std::optional<tcp::endpoint> source) {
  ProxyHeader h;
  h.status = ProxyHeader::Status::kDone;
  h.length = length;
  h.source = source;
  return h;
}

std::optional<uint16_t> parse_port(std::string_view t) {
  unsigned v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec != std::errc() || end != t.data() + t.size() || v > 65535 || (t.size() > 1 && t[0] == '0')) {
    return std::nullopt;
  }
  return static_cast<uint16_t>(v);
}

// "PROXY TCP4 198.51.100.22 203.0.113.7 35646 80\r\n"
ProxyHeader parse_v1(std::string_view bytes) {
  const std::size_t lf = bytes.substr(0, kV1Most).find('\n');
  if (lf == std::string_view::npos) {
    if (bytes.size() >= kV1Most) return invalid("a version 1 header longer than 107 bytes");
    return {};
  }
  if (lf == 0 || bytes[lf - 1] != '\r') return invalid("a version 1 header not ended by CRLF");
  std::string_view line = bytes.substr(kV1Prefix.size(), lf - 1 - kV1Prefix.size());
  std::vector<std::string_view> words;
  for (std::size_t at = 0; at <= line.size();) {
    const std::size_t sp = std::min(line.find(' ', at), line.size());
    words.push_back(line.substr(at, sp - at));
    at = sp + 1;
  }
  if (words[0] == "UNKNOWN") return done(lf + 1, std::nullopt);  // the rest is to be ignored
  if ((words[0] != "TCP4" && words[0] != "TCP6") || words.size() != 5) {
    return invalid("a version 1 header must be PROXY TCP4|TCP6 <src> <dst> <sport> <dport> or PROXY UNKNOWN");
  }
  const int family = words[0] == "TCP4" ? AF_INET : AF_INET6;
  std::array<unsigned char, 16> src{}, dst{};
  const std::string s(words[1]), d(words[2]);
  const std::optional<uint16_t> sport = parse_port(words[3]), dport = parse_port(words[4]);
  if (inet_pton(family, s.c_str(), src.data()) != 1 || inet_pton(family, d.c_str(), dst.data()) != 1 || !sport ||
      !dport) {
    return invalid("a version 1 header with a malformed address or port");
  }
  asio::ip::address a;
  if (family == AF_INET) {
    asio::ip::address_v4::bytes_type b;
    std::memcpy(b.data(), src.data(), 4);
    a = asio::ip::address_v4(b);
  } else {
    asio::ip::address_v6::bytes_type b;
    std::memcpy(b.data(), src.data(), 16);
    a = asio::ip::address_v6(b);
  }
  return done(lf + 1, tcp::endpoint(a, *sport));
}

ProxyHeader parse_v2(std::string_view bytes) {
  if (bytes.size() < kV2Fixed) return {};
  const auto u8 = [&](std::size_t i) { return static_cast<unsigned char>(bytes[i]); };
  if ((u8(12) >> 4) != 2) return invalid("a version 2 signature with version " + std::to_string(u8(12) >> 4));
  const unsigned command = u8(12) & 0x0f;
  if (command > 1) return invalid("a version 2 header with an unknown command");
  const std::size_t length = kV2Fixed + ((std::size_t{u8(14)} << 8) | u8(15));
  if (length > kMostProxyHeaderBytes) return invalid("a version 2 header of " + std::to_string(length) + " bytes");
  if (bytes.size() < length) return {};
  if (command == 0) return done(length, std::nullopt);  // LOCAL: the proxy's own connection
  const unsigned family = u8(13);
  const std::size_t body = length - kV2Fixed;
  if (family == 0x11 && body >= 12) {  // TCP over IPv4: src, dst, sport, dport
    asio::ip::address_v4::bytes_type b;
    std::memcpy(b.data(), bytes.data() + 16, 4);
    return done(length, tcp::endpoint(asio::ip::address_v4(b), static_cast<uint16_t>((u8(24) << 8) | u8(25))));
  }
  if (family == 0x21 && body >= 36) {  // TCP over IPv6
    asio::ip::address_v6::bytes_type b;
    std::memcpy(b.data(), bytes.data() + 16, 16);
    return done(length, tcp::endpoint(asio::ip::address_v6(b), static_cast<uint16_t>((u8(48) << 8) | u8(49))));
  }
  if (family == 0x11 || family == 0x21) return invalid("a version 2 header too short for its addresses");
  return done(length, std::nullopt);  // UNSPEC, UDP, a Unix socket: nothing to take (as v1's UNKNOWN)
}

// `bytes` could still become `whole`: every byte so far matches.
bool prefix_of(std::string_view bytes, std::string_view whole) {
  return whole.substr(0, bytes.size()) == bytes.substr(0, whole.size());
}

}  // namespace

ProxyHeader parse_proxy_header(std::string_view bytes) {
  if (bytes.empty()) return {};
  if (prefix_of(bytes, kV1Prefix)) return bytes.size() < kV1Prefix.size() ? ProxyHeader{} : parse_v1(bytes);
  if (prefix_of(bytes, kV2Signature)) return bytes.size() < kV2Signature.size() ? ProxyHeader{} : parse_v2(bytes);
  return invalid("the connection did not start with a PROXY protocol header");
}

}  // namespace sg::io
