// A downstream peer's "ip:port": inline for every IPv4 address and short IPv6 ones, on the
// heap for long IPv6 ones; the same text either way, and the ip without its port.
#include "proxy/peer.h"

#include <gtest/gtest.h>

namespace sg::proxy {
namespace {

io::tcp::endpoint ep(const char* ip, unsigned short port) { return {asio::ip::make_address(ip), port}; }

// Whether the text lives in the object itself (a std::string keeps only 15 characters so).
bool text_inline(const Peer& p) {
  const char* text = p.address().data();
  const char* self = reinterpret_cast<const char*>(&p);
  return text >= self && text < self + sizeof p;
}

TEST(Peer, AddressTextIpAndWhereTheTextLives) {
  struct Case {
    const char* ip;
    unsigned short port;
    const char* text;
    bool inline_text;
  };
  const Case cases[] = {
      {"255.255.255.255", 65535, "255.255.255.255:65535", true},  // the longest IPv4 address
      {"2001:db8::1", 443, "[2001:db8::1]:443", true},           // a short IPv6 address
      {"2a02:1810:4d0e:9f00:1c4e:2b5f:8e3a:71c2", 54321, "[2a02:1810:4d0e:9f00:1c4e:2b5f:8e3a:71c2]:54321", false},
  };
  for (const Case& c : cases) {
    Peer p(ep(c.ip, c.port));
    EXPECT_EQ(p.address(), c.text);
    EXPECT_EQ(p.ip(), c.ip);
    EXPECT_EQ(text_inline(p), c.inline_text) << c.ip;
  }
}

TEST(Peer, ThirtyOneCharactersAreInlineAndThirtyTwoAreNot) {
  // "[" + 23 + "]:" + 5 = 31.
  Peer at(ep("2001:db8:aaaa:2:3:4:5:6", 12345));
  ASSERT_EQ(at.address().size(), 31u) << at.address();
  EXPECT_TRUE(text_inline(at));
  Peer over(ep("2001:db8:aaaa:22:3:4:5:6", 12345));
  ASSERT_EQ(over.address().size(), 32u) << over.address();
  EXPECT_EQ(over.address(), "[2001:db8:aaaa:22:3:4:5:6]:12345");
  EXPECT_FALSE(text_inline(over));
}

}  // namespace
}  // namespace sg::proxy
