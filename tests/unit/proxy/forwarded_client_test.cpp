// listeners[].trusted_proxies (proxy/forwarded_client.h): the client is the rightmost
// X-Forwarded-For address that is not a trusted proxy, read only from a trusted peer;
// whatever a client writes further left, or instead of an address, is never believed.
#include "proxy/forwarded_client.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sg::proxy {
namespace {

std::vector<routing::AddressBlock> blocks(std::vector<std::string> texts) {
  std::vector<routing::AddressBlock> out;
  for (const std::string& t : texts) {
    routing::AddressBlock b;
    EXPECT_EQ(routing::parse_address_block(t, b), "");
    out.push_back(b);
  }
  return out;
}

std::string client(std::vector<std::string> xff_lines, std::string peer,
                   std::vector<std::string> trusted = {"10.0.0.0/8"}) {
  http::HeaderMap h;
  for (std::string& line : xff_lines) h.add("X-Forwarded-For", std::move(line));
  std::string storage;
  return std::string(forwarded_client(h, peer, blocks(trusted), storage));
}

TEST(ForwardedClient, TheRightmostUntrustedAddressFromATrustedPeer) {
  EXPECT_EQ(client({"203.0.113.7"}, "10.0.0.1"), "203.0.113.7");
  EXPECT_EQ(client({"1.1.1.1, 203.0.113.7, 10.0.0.2"}, "10.0.0.1"), "203.0.113.7")
      << "1.1.1.1 is what the client wrote: never read";
  EXPECT_EQ(client({"1.1.1.1", "203.0.113.7,10.0.0.2"}, "10.0.0.1"), "203.0.113.7") << "every field line, in order";
  EXPECT_EQ(client({"2001:db8::7"}, "::ffff:10.0.0.1"), "2001:db8::7") << "a mapped peer is its IPv4 address";
}

TEST(ForwardedClient, NothingIsBelievedFromAnUntrustedPeerOrBeyondWhatIsNotAnAddress) {
  EXPECT_EQ(client({"203.0.113.7"}, "198.51.100.1"), "198.51.100.1");
  EXPECT_EQ(client({"203.0.113.7"}, "10.0.0.1", {}), "10.0.0.1") << "no trusted proxies: the peer";
  EXPECT_EQ(client({}, "10.0.0.1"), "10.0.0.1");
  EXPECT_EQ(client({"203.0.113.7, unknown, 10.0.0.2"}, "10.0.0.1"), "10.0.0.2") << "the last trusted hop";
  EXPECT_EQ(client({"203.0.113.7:4000"}, "10.0.0.1"), "10.0.0.1") << "an address with a port is not an address";
  EXPECT_EQ(client({"10.0.0.3, 10.0.0.2"}, "10.0.0.1"), "10.0.0.3") << "all trusted: the leftmost";
}

}  // namespace
}  // namespace sg::proxy
