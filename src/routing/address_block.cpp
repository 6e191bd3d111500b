#include "routing/address_block.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <cstring>

namespace sg::routing {

namespace {

constexpr int kV4Offset = 96;  // an IPv4 address's bits start here in its mapped form

std::optional<IpAddress> parse_ip_counting(std::string_view text, bool& v4) {
  std::string s(text.substr(0, text.find('%')));  // inet_pton needs a terminated string, no zone
  IpAddress a;
  in_addr a4;
  if (inet_pton(AF_INET, s.c_str(), &a4) == 1) {
    a.bytes[10] = a.bytes[11] = 0xff;
    std::memcpy(a.bytes.data() + 12, &a4, 4);
    v4 = true;
    return a;
  }
  in6_addr a6;
  if (inet_pton(AF_INET6, s.c_str(), &a6) != 1) return std::nullopt;
  std::memcpy(a.bytes.data(), &a6, 16);
  v4 = false;
  return a;
}

// `a` with every bit beyond the first `bits` cleared.
IpAddress masked(IpAddress a, int bits) {
  for (int i = 0; i < 16; ++i) {
    const int keep = std::clamp(bits - 8 * i, 0, 8);
    a.bytes[i] &= static_cast<uint8_t>(0xff00 >> keep);
  }
  return a;
}

std::string text_of(const IpAddress& a, bool v4) {
  char buf[INET6_ADDRSTRLEN];
  if (v4) return inet_ntop(AF_INET, a.bytes.data() + 12, buf, sizeof buf);
  return inet_ntop(AF_INET6, a.bytes.data(), buf, sizeof buf);
}

}  // namespace

std::optional<IpAddress> parse_ip(std::string_view text) {
  bool v4 = false;
  return parse_ip_counting(text, v4);
}

bool AddressBlock::contains(const IpAddress& a) const { return masked(a, prefix_bits) == network; }

std::string parse_address_block(std::string_view text, AddressBlock& out) {
  const std::size_t slash = text.find('/');
  const std::string_view addr = text.substr(0, slash);
  if (addr.find('%') != std::string_view::npos) return "\"" + std::string(text) + "\": a zone has no place in a block";
  bool v4 = false;
  std::optional<IpAddress> a = parse_ip_counting(addr, v4);
  if (!a) return "\"" + std::string(text) + "\" is not an IP address or address block (e.g. 10.0.0.0/8, 2001:db8::/32)";
  const int most = v4 ? 32 : 128;
  int len = most;
  if (slash != std::string_view::npos) {
    const std::string_view digits = text.substr(slash + 1);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), len);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || len < 0 || len > most) {
      return "\"" + std::string(text) + "\": the length after / must be 0-" + std::to_string(most);
    }
  }
  out.prefix_bits = len + (v4 ? kV4Offset : 0);
  out.network = masked(*a, out.prefix_bits);
  if (!(out.network == *a)) {
    return "\"" + std::string(text) + "\" has bits set beyond its /" + std::to_string(len) + " (did you mean " +
           text_of(out.network, v4) + "/" + std::to_string(len) + "?)";
  }
  return "";
}

}  // namespace sg::routing
