// Routes compiled once per config snapshot: matchers lowered into plain comparisons and
// pre-compiled regexes, clusters resolved to objects. match() walks routes in file order
// and returns the first that matches, without allocating.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/schema.h"
#include "http/message.h"
#include "routing/address_block.h"
#include "upstream/cluster.h"

namespace re2 {
class RE2;
}

namespace sg::routing {

struct CompiledRoute {
  const config::RouteSection* cfg = nullptr;  // owned by the snapshot's Config
  std::size_t index = 0;
  std::shared_ptr<upstream::Cluster> cluster;  // null for direct_response / redirect

  // Matchers.
  enum class HostKind : uint8_t { kAny, kExact, kSuffix } host_kind = HostKind::kAny;
  std::string host;  // lower-case; for kSuffix: ".example.com"
  enum class PathKind : uint8_t { kAny, kExact, kPrefix, kRegex } path_kind = PathKind::kAny;
  std::string path;
  // RE2, not std::regex: libstdc++'s matcher recurses per input character, so one long
  // path against "^/api/(.*)/items$" overflowed a worker's stack and took the process
  // down. RE2 matches in time linear in the path, without recursion.
  std::shared_ptr<const re2::RE2> path_regex;
  bool case_sensitive = true;  // false: path matchers ignore ASCII case
  std::vector<std::string> methods;
  std::vector<std::string> listeners;
  std::vector<AddressBlock> sources;  // empty: any client

  bool matches(const http::RequestHead& req, std::string_view listener, const ClientAddress& client) const;
};

class RouteTable {
 public:
  RouteTable() = default;
  // Fails with a message when a route names a cluster missing from `clusters` (the loader
  // already rejects that; this guards programmatic configs).
  static Result<RouteTable> build(const config::Config& cfg,
                                  const std::vector<std::shared_ptr<upstream::Cluster>>& clusters,
                                  std::string& error);

  const CompiledRoute* match(const http::RequestHead& req, std::string_view listener,
                             const ClientAddress& client) const;
  const std::vector<CompiledRoute>& routes() const { return routes_; }

 private:
  std::vector<CompiledRoute> routes_;
};

// Host without port, for matching ("Example.com:8080" -> "Example.com", "[::1]:80" -> "[::1]").
std::string_view host_without_port(std::string_view authority);
// Value of query parameter `name` in a raw query string (no decoding); nullopt if absent.
std::optional<std::string_view> query_param(std::string_view query, std::string_view name);

}  // namespace sg::routing
