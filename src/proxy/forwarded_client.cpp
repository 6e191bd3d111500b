#include "proxy/forwarded_client.h"

#include <algorithm>
#include <optional>

namespace sg::proxy {

namespace {

// Whether `ip` is a trusted proxy; nullopt when it is not an address at all.
std::optional<bool> trusted_proxy(std::string_view ip, const std::vector<routing::AddressBlock>& trusted) {
  const std::optional<routing::IpAddress> a = routing::parse_ip(ip);
  if (!a) return std::nullopt;
  return std::any_of(trusted.begin(), trusted.end(), [&](const routing::AddressBlock& b) { return b.contains(*a); });
}

}  // namespace

std::string_view forwarded_client(const http::HeaderMap& headers, std::string_view peer_ip,
                                  const std::vector<routing::AddressBlock>& trusted, std::string& storage) {
  if (trusted.empty() || trusted_proxy(peer_ip, trusted) != true) return peer_ip;
  const std::string list = headers.joined("x-forwarded-for");
  std::vector<std::string_view> hops;
  http::for_each_list_item(list, [&](std::string_view item) {
    hops.push_back(item);
    return true;
  });
  std::string_view client = peer_ip;
  for (auto it = hops.rbegin(); it != hops.rend(); ++it) {
    const std::optional<bool> proxy = trusted_proxy(*it, trusted);
    if (!proxy) break;  // not an address: the last trusted hop stands
    client = *it;
    if (!*proxy) break;
  }
  if (client.data() == peer_ip.data()) return peer_ip;
  storage.assign(client);
  return storage;
}

}  // namespace sg::proxy
