// The compiled route table, from YAML through the real loader: first match in file order,
// host exact and wildcard (port ignored, case-insensitive), path exact/prefix/regex,
// methods, headers, query parameters, listeners and client address blocks.
#include "routing/route_table.h"

#include <gtest/gtest.h>

#include <string>

#include "config/loader.h"

namespace sg::routing {
namespace {

class Routes : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r = config::load_string(R"(
listeners:
  - { name: public, address: "127.0.0.1:0" }
  - { name: internal, address: "127.0.0.1:0" }
clusters:
  - { name: app, endpoints: ["127.0.0.1:9000"] }
routes:
  - { name: ops, match: { path_prefix: /ops/, source: [10.0.0.0/8, "2001:db8::/32", 192.0.2.7] }, cluster: app }
  - { name: ops-deny, match: { path_prefix: /ops/ }, direct_response: { status: 403 } }
  - { name: admin-host, match: { host: admin.example.com }, direct_response: { status: 200 } }
  - { name: wild, match: { host: "*.example.com", path_prefix: /w/ }, direct_response: { status: 200 } }
  - { name: exact, match: { path: /exact }, direct_response: { status: 200 } }
  - { name: deny, match: { path_prefix: /Admin, case_sensitive: false }, direct_response: { status: 403 } }
  - { name: deny-exact, match: { path: /Secret, case_sensitive: false }, direct_response: { status: 403 } }
  - { name: deny-regex, match: { path_regex: "/keys/[a-z]+", case_sensitive: false }, direct_response: { status: 403 } }
  - { name: regex, match: { path_regex: "/items/[0-9]+" }, direct_response: { status: 200 } }
  - { name: nested, match: { path_regex: "^/n/(.*)/items$" }, direct_response: { status: 200 } }
  - { name: alternation, match: { path_regex: "/(a|b)*c" }, direct_response: { status: 200 } }
  - { name: posts, match: { path_prefix: /api/, methods: [POST] }, cluster: app }
  - { name: beta, match: { path_prefix: /api/, headers: [ { name: x-beta, value: "1" } ] }, cluster: app }
  - { name: query, match: { path_prefix: /api/, query: [ { name: v, value: "2" } ] }, cluster: app }
  - { name: internal, match: { path_prefix: /, listener: [internal] }, cluster: app }
  - { name: api, match: { path_prefix: /api/ }, cluster: app }
)");
    ASSERT_TRUE(r.ok()) << r.error_text();
    cfg_ = r.config;
    std::string error;
    auto cl = upstream::Cluster::build(cfg_->clusters[0], nullptr, 1, error);
    ASSERT_TRUE(cl.ok()) << error;
    clusters_.push_back(*cl);
    auto t = RouteTable::build(*cfg_, clusters_, error);
    ASSERT_TRUE(t.ok()) << error;
    table_ = std::move(*t);
  }

  std::string route(std::string method, std::string host, std::string path, std::string query = "",
                    std::string listener = "public", std::vector<std::pair<std::string, std::string>> headers = {},
                    std::string client = "127.0.0.1") {
    http::RequestHead req;
    req.method = std::move(method);
    req.authority = std::move(host);
    req.path = std::move(path);
    req.query = std::move(query);
    for (auto& [k, v] : headers) req.headers.add(k, v);
    const CompiledRoute* r = table_.match(req, listener, ClientAddress(client));
    return r == nullptr ? "-" : r->cfg->name;
  }

  std::shared_ptr<const config::Config> cfg_;
  std::vector<std::shared_ptr<upstream::Cluster>> clusters_;
  RouteTable table_;
};

TEST_F(Routes, HostsExactAndWildcardWithoutPort) {
  EXPECT_EQ(route("GET", "admin.example.com", "/anything"), "admin-host");
  EXPECT_EQ(route("GET", "admin.example.com:8443", "/anything"), "admin-host");
  EXPECT_EQ(route("GET", "a.example.com", "/w/x"), "wild");
  EXPECT_EQ(route("GET", "example.com", "/w/x"), "-") << "a wildcard needs a label in front";
}

TEST_F(Routes, PathsExactPrefixAndRegex) {
  EXPECT_EQ(route("GET", "h", "/exact"), "exact");
  EXPECT_EQ(route("GET", "h", "/exact/more"), "-");
  EXPECT_EQ(route("GET", "h", "/items/42"), "regex");
  EXPECT_EQ(route("GET", "h", "/items/42x"), "-") << "a regex matches the whole path";
}

// std::regex (libstdc++) recursed per character of the path: a path of 15 KiB against the
// first, or 1 KiB against the second, overflowed the stack and killed the process.
TEST_F(Routes, ARegexMatchesAPathAsLongAsAnyRequestCanSendWithoutRecursing) {
  const std::string many(256 * 1024, 'x');
  EXPECT_EQ(route("GET", "h", "/n/" + many + "/items"), "nested");
  EXPECT_EQ(route("GET", "h", "/n/" + many + "/itemz"), "-");
  std::string ab;
  for (int i = 0; i < 128 * 1024; ++i) ab += "ab";
  EXPECT_EQ(route("GET", "h", "/" + ab + "c"), "alternation");
  EXPECT_EQ(route("GET", "h", "/" + ab), "-");
}

TEST_F(Routes, PathsCaseSensitiveUnlessTheRouteSaysOtherwise) {
  EXPECT_EQ(route("GET", "h", "/EXACT"), "-") << "paths are case-sensitive by default (RFC 3986)";
  for (const char* p : {"/admin", "/ADMIN", "/aDmIn/x", "/Admin"}) EXPECT_EQ(route("GET", "h", p), "deny") << p;
  EXPECT_EQ(route("GET", "h", "/Adm"), "-") << "a prefix longer than the path never matches";
  EXPECT_EQ(route("GET", "h", "/SECRET"), "deny-exact");
  EXPECT_EQ(route("GET", "h", "/secret/x"), "-");
  EXPECT_EQ(route("GET", "h", "/KEYS/AbC"), "deny-regex");
  EXPECT_EQ(route("GET", "h", "/keys/ab1"), "-");
}

TEST_F(Routes, FirstMatchInFileOrderWithMethodsHeadersAndQuery) {
  EXPECT_EQ(route("POST", "h", "/api/x"), "posts");
  EXPECT_EQ(route("GET", "h", "/api/x", "", "public", {{"X-Beta", "1"}}), "beta");
  EXPECT_EQ(route("GET", "h", "/api/x", "a=1&v=2"), "query");
  EXPECT_EQ(route("GET", "h", "/api/x", "v=3"), "api");
  EXPECT_EQ(route("GET", "h", "/api/x"), "api");
}

TEST_F(Routes, ListenerScopedRoutes) {
  EXPECT_EQ(route("GET", "h", "/other", "", "internal"), "internal");
  EXPECT_EQ(route("GET", "h", "/other", "", "public"), "-");
}

TEST_F(Routes, SourceBlocksHoldForEverySpellingOfTheClientsAddress) {
  auto from = [&](std::string client) { return route("GET", "h", "/ops/x", "", "public", {}, std::move(client)); };
  EXPECT_EQ(from("10.1.2.3"), "ops");
  EXPECT_EQ(from("::ffff:10.1.2.3"), "ops") << "an IPv4 client of a dual-stack listener";
  EXPECT_EQ(from("2001:db8:1::5"), "ops");
  EXPECT_EQ(from("192.0.2.7"), "ops");
  EXPECT_EQ(from("192.0.2.8"), "ops-deny");
  EXPECT_EQ(from("11.0.0.1"), "ops-deny");
  EXPECT_EQ(from("::ffff:11.0.0.1"), "ops-deny");
  EXPECT_EQ(from("2001:db9::1"), "ops-deny");
  EXPECT_EQ(from("::a01:203"), "ops-deny") << "the IPv4-compatible form is not the mapped one";
  EXPECT_EQ(from("not an address"), "ops-deny") << "an allow rule fails closed";
}

TEST(AddressBlocks, ParsedAndRefused) {
  AddressBlock b;
  EXPECT_EQ(parse_address_block("10.0.0.0/8", b), "");
  EXPECT_EQ(b.prefix_bits, 104);
  EXPECT_TRUE(b.contains(*parse_ip("10.255.255.255")));
  EXPECT_FALSE(b.contains(*parse_ip("9.255.255.255")));
  EXPECT_EQ(parse_address_block("0.0.0.0/0", b), "");
  EXPECT_TRUE(b.contains(*parse_ip("203.0.113.9")));
  EXPECT_FALSE(b.contains(*parse_ip("2001:db8::1"))) << "an IPv4 block holds for IPv4 clients only";
  EXPECT_EQ(parse_address_block("fe80::1%eth0", b), "\"fe80::1%eth0\": a zone has no place in a block");
  EXPECT_TRUE(parse_ip("fe80::1%eth0").has_value()) << "a client's zone is ignored";
  EXPECT_EQ(parse_address_block("10.0.0.1/8", b),
            "\"10.0.0.1/8\" has bits set beyond its /8 (did you mean 10.0.0.0/8?)");
  EXPECT_EQ(parse_address_block("2001:db8::1/32", b),
            "\"2001:db8::1/32\" has bits set beyond its /32 (did you mean 2001:db8::/32?)");
  EXPECT_EQ(parse_address_block("10.0.0.0/33", b), "\"10.0.0.0/33\": the length after / must be 0-32");
  EXPECT_EQ(parse_address_block("10.0.0.0/", b), "\"10.0.0.0/\": the length after / must be 0-32");
  EXPECT_EQ(parse_address_block("localhost", b),
            "\"localhost\" is not an IP address or address block (e.g. 10.0.0.0/8, 2001:db8::/32)");
}

TEST(RouteHelpers, HostWithoutPortAndQueryParam) {
  EXPECT_EQ(host_without_port("Example.com:8080"), "Example.com");
  EXPECT_EQ(host_without_port("[::1]:80"), "[::1]");
  EXPECT_EQ(query_param("a=1&b=2", "b"), "2");
  EXPECT_FALSE(query_param("a=1", "b").has_value());
}

}  // namespace
}  // namespace sg::routing
