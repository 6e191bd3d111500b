// The text of an address as logs, X-Forwarded-For and the access log carry it: IPv4 is
// formatted by hand (io/socket.cpp), so its digits are checked against inet_ntop's.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "io/socket.h"

namespace sg::io {
namespace {

tcp::endpoint v4(const char* text, unsigned short port) {
  return {asio::ip::make_address_v4(text), port};
}

TEST(EndpointText, FormatsIpv4Extremes) {
  EXPECT_EQ(endpoint_text(v4("0.0.0.0", 0)), "0.0.0.0:0");
  EXPECT_EQ(endpoint_text(v4("255.255.255.255", 65535)), "255.255.255.255:65535");
  EXPECT_EQ(endpoint_text(v4("10.0.100.9", 80)), "10.0.100.9:80");
  EXPECT_EQ(endpoint_text(v4("127.0.0.1", 18004)), "127.0.0.1:18004");
}

TEST(EndpointText, AgreesWithInetNtopOnRandomIpv4) {
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const uint32_t raw = rng();
    const auto port = static_cast<unsigned short>(rng());
    in_addr a{htonl(raw)};
    char buf[INET_ADDRSTRLEN];
    ASSERT_NE(inet_ntop(AF_INET, &a, buf, sizeof(buf)), nullptr);
    const tcp::endpoint ep(asio::ip::address_v4(raw), port);
    ASSERT_EQ(endpoint_text(ep), std::string(buf) + ":" + std::to_string(port));
  }
}

TEST(EndpointText, BracketsIpv6) {
  EXPECT_EQ(endpoint_text({asio::ip::make_address_v6("::1"), 443}), "[::1]:443");
  EXPECT_EQ(endpoint_text({asio::ip::make_address_v6("2001:db8::7"), 8080}), "[2001:db8::7]:8080");
  EXPECT_EQ(endpoint_text({asio::ip::make_address_v6("::ffff:10.1.2.3"), 1}), "[::ffff:10.1.2.3]:1");
}

}  // namespace
}  // namespace sg::io
