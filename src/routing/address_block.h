// Client addresses and address blocks for routes' `match.source` (an access rule by who is
// connecting: nginx's allow/deny, HAProxy's `src` ACL). One address has one form here: an
// IPv4 address is kept as the IPv4-mapped IPv6 address (::ffff:a.b.c.d) that a dual-stack
// listener reports for an IPv4 client, so `10.0.0.0/8` holds for that client on either
// kind of listener.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sg::routing {

struct IpAddress {
  std::array<uint8_t, 16> bytes{};
  bool operator==(const IpAddress&) const = default;
  // An IPv4 address (in the mapped form: its 4 bytes are bytes[12..15]).
  bool is_v4() const {
    for (int i = 0; i < 10; ++i) {
      if (bytes[i] != 0) return false;
    }
    return bytes[10] == 0xff && bytes[11] == 0xff;
  }
};

// "203.0.113.7", "2001:db8::1", "::ffff:203.0.113.7", "fe80::1%eth0" (the zone is ignored);
// nullopt for anything else.
std::optional<IpAddress> parse_ip(std::string_view text);

// `10.0.0.0/8`, `2001:db8::/32`, or one address (`192.0.2.1` = /32, `::1` = /128).
struct AddressBlock {
  IpAddress network;     // its bits beyond prefix_bits are zero
  int prefix_bits = 0;   // over the 128-bit form: an IPv4 block's length plus 96
  bool contains(const IpAddress& a) const;
};

// Parses `text` into `out`; "" on success, else why not. A block with bits set beyond its
// length (`10.0.0.1/8`) is refused, naming the block it may have meant: it reads like an
// address and would hold for a whole network.
std::string parse_address_block(std::string_view text, AddressBlock& out);

// The client's address, parsed when a route first asks for it (most routes never do).
class ClientAddress {
 public:
  explicit ClientAddress(std::string_view ip_text) : text_(ip_text) {}
  const std::optional<IpAddress>& get() const {
    if (!parsed_) {
      addr_ = parse_ip(text_);
      parsed_ = true;
    }
    return addr_;
  }

 private:
  std::string_view text_;
  mutable bool parsed_ = false;
  mutable std::optional<IpAddress> addr_;
};

}  // namespace sg::routing
