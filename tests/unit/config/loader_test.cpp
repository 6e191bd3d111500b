// Config loader: a corpus of broken files with the exact messages (file:line:column, YAML
// path, what is wrong, a suggestion), all errors of a file reported, defaults, printing.
#include "config/loader.h"

#include <gtest/gtest.h>

#include <string>

namespace sg::config {
namespace {

std::string errors_of(const std::string& yaml) {
  LoadResult r = load_string(yaml, "stealgate.yaml");
  EXPECT_FALSE(r.ok());
  return r.error_text();
}

const char* kValid = R"(listeners:
  - name: public
    address: 127.0.0.1:8080
clusters:
  - name: api
    endpoints: [127.0.0.1:9000, {address: 127.0.0.1:9001, weight: 2}]
routes:
  - name: v1
    match: { path_prefix: /v1/ }
    cluster: api
  - name: default
    direct_response: { status: 200, body: "ok\n" }
)";

TEST(ConfigLoader, ValidFileWithDefaultsResolved) {
  LoadResult r = load_string(kValid, "stealgate.yaml");
  ASSERT_TRUE(r.ok()) << r.error_text();
  const Config& c = *r.config;
  ASSERT_EQ(c.listeners.size(), 1u);
  EXPECT_EQ(c.listeners[0].address.port, 8080);
  EXPECT_EQ(c.listeners[0].header_timeout, Duration{10'000});
  EXPECT_EQ(c.admin.address.text(), "127.0.0.1:9901");
  ASSERT_EQ(c.clusters.size(), 1u);
  EXPECT_EQ(c.clusters[0].endpoints[1].weight, 2u);
  EXPECT_EQ(c.limits.max_concurrent_requests, 10000u);
  EXPECT_EQ(c.limits.lifo_after, Duration{0});  // the admission queue is FIFO unless asked
  ASSERT_EQ(c.routes.size(), 2u);
  EXPECT_EQ(c.routes[1].direct_response->body, "ok\n");
}

TEST(ConfigLoader, PrintedConfigLoadsBackToTheSame) {
  LoadResult r = load_string(kValid, "a.yaml");
  ASSERT_TRUE(r.ok());
  std::string printed = to_yaml(*r.config);
  LoadResult again = load_string(printed, "printed.yaml");
  ASSERT_TRUE(again.ok()) << again.error_text() << printed;
  EXPECT_EQ(to_yaml(*again.config), printed);
}

TEST(ConfigLoader, AdaptiveLifoThresholdIsReadAndPrinted) {
  LoadResult r = load_string(std::string(kValid) + "limits:\n  lifo_after: 15ms\n  queue_timeout: 200ms\n", "a.yaml");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.config->limits.lifo_after, Duration{15});
  EXPECT_NE(to_yaml(*r.config).find("lifo_after: 15ms"), std::string::npos);
  EXPECT_NE(errors_of(std::string(kValid) + "limits:\n  lifo_after: soon\n").find("limits.lifo_after"),
            std::string::npos);
}

TEST(ConfigLoader, ReusePortIsAutoOrAFlagInAnyOfItsSpellings) {
  const std::vector<std::pair<std::string, AutoFlag>> cases{
      {"auto", AutoFlag::kAuto}, {"true", AutoFlag::kOn}, {"yes", AutoFlag::kOn},  {"on", AutoFlag::kOn},
      {"false", AutoFlag::kOff}, {"no", AutoFlag::kOff},  {"off", AutoFlag::kOff}};
  for (const auto& [word, value] : cases) {
    LoadResult r = load_string("listeners:\n  - address: 127.0.0.1:8080\n    reuse_port: " + word + "\n", "a.yaml");
    ASSERT_TRUE(r.ok()) << word << ": " << r.error_text();
    EXPECT_EQ(r.config->listeners.at(0).reuse_port, value) << word;
    // Printed as auto, true or false, and read back the same.
    const std::string printed = to_yaml(*r.config);
    const std::string shown = value == AutoFlag::kAuto ? "auto" : value == AutoFlag::kOn ? "true" : "false";
    EXPECT_NE(printed.find("reuse_port: " + shown + "\n"), std::string::npos) << printed;
    LoadResult again = load_string(printed, "printed.yaml");
    ASSERT_TRUE(again.ok()) << again.error_text();
    EXPECT_EQ(again.config->listeners.at(0).reuse_port, value) << word;
  }
  LoadResult absent = load_string("listeners:\n  - address: 127.0.0.1:8080\n", "a.yaml");
  ASSERT_TRUE(absent.ok());
  EXPECT_EQ(absent.config->listeners.at(0).reuse_port, AutoFlag::kAuto);
}

TEST(ConfigLoader, UnknownClusterNamesPositionAndSuggestion) {
  std::string yaml = std::string(kValid) + R"(  - name: typo
    match: { path: /x }
    cluster: apii
)";
  EXPECT_EQ(errors_of(yaml), "stealgate.yaml:15:14: routes[2].cluster: unknown cluster \"apii\" (did you mean \"api\"?)\n");
}

TEST(ConfigLoader, UnknownKeySuggestsTheRightOne) {
  EXPECT_EQ(errors_of("listeners:\n  - adress: 127.0.0.1:8080\n"),
            "stealgate.yaml:2:5: listeners[0].adress: unknown key \"adress\" (did you mean \"address\"?)\n"
            "stealgate.yaml:2:5: listeners[0]: missing required key \"address\"\n");
}

TEST(ConfigLoader, DuplicateKeysAreErrors) {
  EXPECT_EQ(errors_of("listeners:\n  - address: 127.0.0.1:1\n    address: 127.0.0.1:2\n"),
            "stealgate.yaml:3:5: listeners[0].address: duplicate key \"address\"\n");
}

TEST(ConfigLoader, WrongTypesAndBadValues) {
  std::string yaml = R"(listeners:
  - address: 127.0.0.1:8080
    backlog: many
    header_timeout: 10 seconds
    reuse_port: maybe
    max_header_bytes: 32 KB
clusters:
  - name: c
    endpoints: [localhost]
    lb: round_robbin
)";
  EXPECT_EQ(errors_of(yaml),
            "stealgate.yaml:3:14: listeners[0].backlog: expected a whole number, got \"many\"\n"
            "stealgate.yaml:4:21: listeners[0].header_timeout: invalid duration \"10 seconds\" (use e.g. 250ms, 10s, 5m, 1h)\n"
            "stealgate.yaml:5:17: listeners[0].reuse_port: expected auto, true or false, got \"maybe\"\n"
            "stealgate.yaml:6:23: listeners[0].max_header_bytes: invalid size \"32 KB\" (use e.g. 8192, 32KiB, 1MiB)\n"
            "stealgate.yaml:9:17: clusters[0].endpoints[0]: invalid address \"localhost\": expected host:port\n"
            "stealgate.yaml:10:9: clusters[0].lb: expected round_robin | random | least_request | ring_hash, got "
            "\"round_robbin\" (did you mean \"round_robin\"?)\n");
}

TEST(ConfigLoader, DuplicateNamesAndAddresses) {
  std::string yaml = R"(listeners:
  - name: a
    address: 127.0.0.1:8080
  - name: a
    address: 127.0.0.1:8080
routes:
  - direct_response: { status: 200 }
    cluster: x
)";
  std::string e = errors_of(yaml);
  EXPECT_NE(e.find("stealgate.yaml:4:11: listeners[1].name: duplicate name \"a\""), std::string::npos) << e;
  EXPECT_NE(e.find("stealgate.yaml:5:14: listeners[1].address: address 127.0.0.1:8080 is already used"), std::string::npos) << e;
  EXPECT_NE(e.find("routes[0]: a route takes only one of cluster, direct_response or redirect"), std::string::npos) << e;
  EXPECT_NE(e.find("routes[0].cluster: unknown cluster \"x\""), std::string::npos) << e;
}

TEST(ConfigLoader, YamlSyntaxErrorHasAPosition) {
  EXPECT_EQ(errors_of("listeners: [\n  - a\n"), "stealgate.yaml:2:3: illegal block entry\n");
  EXPECT_EQ(errors_of("a: [1, 2\nb: 3\n"), "stealgate.yaml:2:2: end of sequence flow not found\n");
}

TEST(ConfigLoader, EmptyFileAndMissingListener) {
  EXPECT_EQ(errors_of(""), "stealgate.yaml:1:1: the configuration is empty\n");
  EXPECT_NE(errors_of("routes: []\n").find("listeners: at least one listener is required"), std::string::npos);
}

TEST(ConfigLoader, AnEmptyListItemIsAnError) {
  // Found by the config fuzzer: an empty route was accepted without its checks, and the
  // printed configuration then failed to load.
  std::string e = errors_of(R"(listeners: [{address: 127.0.0.1:8080}]
clusters: [{name: app, endpoints: [127.0.0.1:1]}]
routes:
  - # nothing here
  - cluster: app
)");
  EXPECT_NE(e.find("stealgate.yaml:4:3: routes[0]: an empty list item (a mapping is expected)"), std::string::npos) << e;
  EXPECT_NE(errors_of("listeners:\n  -\n").find("listeners[0]: an empty list item"), std::string::npos);
}

TEST(ConfigLoader, AClusterWithANullEndpointListIsAnError) {
  // Found by the config fuzzer: `endpoints:` with nothing after it (a null node) passed the
  // "at least one endpoint" check that an absent key or `[]` fails, and the printed `[]`
  // then failed to load.
  const std::string head = "listeners: [{address: 127.0.0.1:8080}]\nclusters:\n  - name: app\n";
  for (const char* endpoints : {"    endpoints:\n", "    endpoints: # a comment\n", "    endpoints: []\n", ""}) {
    std::string e = errors_of(head + endpoints);
    EXPECT_NE(e.find("clusters[0].endpoints: a cluster needs at least one endpoint"), std::string::npos)
        << endpoints << "\n" << e;
  }
  EXPECT_EQ(errors_of(head + "    endpoints:\n    lb: random\n"),
            "stealgate.yaml:4:5: clusters[0].endpoints: a cluster needs at least one endpoint\n");
}

TEST(ConfigLoader, RegexAndRedirectValidation) {
  std::string e = errors_of(R"(listeners: [{address: 127.0.0.1:8080}]
routes:
  - match: { path_regex: "/(a" }
    redirect: { status: 200, location: /x }
)");
  EXPECT_NE(e.find("stealgate.yaml:3:26: routes[0].match.path_regex: invalid regular expression"), std::string::npos) << e;
  EXPECT_NE(e.find("routes[0].redirect.status: must be between 300 and 399, got 200"), std::string::npos) << e;
  // RE2 has no lookaround (it could not bound the time a match takes): named at load.
  e = errors_of("listeners: [{address: 127.0.0.1:8080}]\nroutes:\n  - match: { path_regex: \"/(?!admin).*\" }\n"
                "    direct_response: { status: 200 }\n");
  EXPECT_NE(e.find("stealgate.yaml:3:26: routes[0].match.path_regex: invalid regular expression (RE2 syntax): "
                   "invalid perl operator: (?!"),
            std::string::npos)
      << e;
}

TEST(ConfigLoader, DrainIdleGraceIsBoundedByTheDrainTimeout) {
  const std::string head = "listeners:\n  - address: 127.0.0.1:8080\n";
  EXPECT_EQ(errors_of(head + "drain_timeout: 2s\ndrain_idle_grace: 3s\n"),
            "stealgate.yaml:4:19: drain_idle_grace: cannot be longer than drain_timeout (2s), which closes every "
            "connection\n");
  LoadResult r = load_string(head + "drain_idle_grace: 2s\n", "stealgate.yaml");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.config->drain_idle_grace, std::chrono::seconds(2));
  EXPECT_EQ(load_string(head, "stealgate.yaml").config->drain_idle_grace, Duration{0});  // closed at once
}

TEST(ConfigLoader, SourceBlocksAreCheckedAndAnEmptyListIsNotAny) {
  EXPECT_EQ(errors_of(R"(listeners:
  - address: 127.0.0.1:8080
routes:
  - match: { path_prefix: /a, source: [10.0.0.1/8, localhost] }
    direct_response: { status: 200 }
  - match: { path_prefix: /b, source: [] }
    direct_response: { status: 403 }
)"),
            "stealgate.yaml:4:39: routes[0].match.source: \"10.0.0.1/8\" has bits set beyond its /8 (did you mean "
            "10.0.0.0/8?)\n"
            "stealgate.yaml:4:39: routes[0].match.source: \"localhost\" is not an IP address or address block (e.g. "
            "10.0.0.0/8, 2001:db8::/32)\n"
            "stealgate.yaml:6:39: routes[1].match.source: an empty list would match every client; leave source out "
            "to mean any client\n");
}

TEST(ConfigLoader, MissingFileIsAnError) {
  LoadResult r = load_file("/nonexistent/stealgate.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error_text(), "/nonexistent/stealgate.yaml: cannot open file\n");
}

}  // namespace
}  // namespace sg::config

namespace sg::config {
namespace {

TEST(ConfigLoader, PathPolicyAndUpgradesAreReadAndPrinted) {
  LoadResult r = load_string(R"(listeners:
  - name: public
    address: 127.0.0.1:8080
    path_normalization: reject
    escaped_slashes: decode
    backslashes: reject
    path_parameters: reject
clusters:
  - name: api
    endpoints: [127.0.0.1:9000]
routes:
  - name: ws
    match: { path_prefix: /ws }
    cluster: api
    upgrades: [WebSocket, h2c]
  - name: rest
    cluster: api
)", "a.yaml");
  ASSERT_TRUE(r.ok()) << r.error_text();
  const Config& c = *r.config;
  EXPECT_EQ(c.listeners[0].path.policy, http::PathPolicy::kReject);
  EXPECT_EQ(c.listeners[0].path.escaped_slashes, http::SlashPolicy::kDecode);
  EXPECT_EQ(c.listeners[0].path.backslashes, http::SlashPolicy::kReject);
  EXPECT_EQ(c.listeners[0].path.path_parameters, http::ParamPolicy::kReject);
  EXPECT_EQ(c.routes[0].upgrades, (std::vector<std::string>{"websocket", "h2c"}));
  EXPECT_EQ(c.routes[1].upgrades, (std::vector<std::string>{"websocket"}));  // the default
  std::string printed = to_yaml(c);
  EXPECT_NE(printed.find("path_normalization: reject"), std::string::npos) << printed;
  EXPECT_NE(printed.find("escaped_slashes: decode"), std::string::npos);
  EXPECT_NE(printed.find("upgrades: [websocket, h2c]"), std::string::npos);
  LoadResult again = load_string(printed, "printed.yaml");
  ASSERT_TRUE(again.ok()) << again.error_text();
  EXPECT_EQ(again.config->listeners[0].path.backslashes, http::SlashPolicy::kReject);
  EXPECT_EQ(again.config->listeners[0].path.path_parameters, http::ParamPolicy::kReject);
}

TEST(ConfigLoader, DefaultsForPathsAndLimitsAreNginxWide) {
  LoadResult r = load_string(kValid, "a.yaml");
  ASSERT_TRUE(r.ok());
  const ListenerSection& l = r.config->listeners[0];
  EXPECT_EQ(l.path.policy, http::PathPolicy::kNormalize);
  EXPECT_EQ(l.path.escaped_slashes, http::SlashPolicy::kKeep);
  EXPECT_EQ(l.path.backslashes, http::SlashPolicy::kKeep);
  EXPECT_EQ(l.path.path_parameters, http::ParamPolicy::kKeep);
  EXPECT_GE(l.max_target_bytes, 8u * 1024 + 64);
  EXPECT_GE(l.max_headers, 200u);
}

TEST(ConfigLoader, BadPathPolicyAndMatchersThatCouldNeverMatch) {
  std::string e = errors_of(R"(listeners:
  - address: 127.0.0.1:8080
    path_normalization: normalise
    escaped_slashes: yes
routes:
  - name: a
    match: { path_prefix: /internal/../admin }
    direct_response: { status: 403 }
  - name: b
    match: { path: "/x//y" }
    direct_response: { status: 403 }
  - name: c
    match: { path_prefix: "/%2e%2e/x" }
    direct_response: { status: 403 }
  - name: d
    direct_response: { status: 200 }
    upgrades: ["web socket"]
)");
  EXPECT_NE(e.find("stealgate.yaml:3:25: listeners[0].path_normalization: expected normalize | reject | off, "
                   "got \"normalise\""), std::string::npos) << e;
  EXPECT_NE(e.find("listeners[0].escaped_slashes: expected keep | reject | decode"), std::string::npos) << e;
  EXPECT_NE(e.find("stealgate.yaml:7:27: routes[0].match.path_prefix: \"/internal/../admin\" is not a normalized "
                   "path and would never match (requests are matched after normalization; write \"/admin\")"),
            std::string::npos) << e;
  EXPECT_NE(e.find("routes[1].match.path: \"/x//y\" is not a normalized path"), std::string::npos) << e;
  EXPECT_NE(e.find("write \"/x/y\""), std::string::npos) << e;
  EXPECT_NE(e.find("routes[2].match.path_prefix: \"/%2e%2e/x\" is not a normalized path and would never match "
                   "(requests are matched after normalization)"), std::string::npos) << e;
  EXPECT_NE(e.find("routes[3].upgrades: \"web socket\" is not a protocol name"), std::string::npos) << e;
}

}  // namespace
}  // namespace sg::config

namespace sg::config {
namespace {

TEST(ConfigLoader, ConfiguredHeadersCannotInjectOrReframe) {
  std::string e = errors_of(R"(listeners:
  - address: 127.0.0.1:8080
routes:
  - name: a
    direct_response: { status: 200, headers: { "X-A": "a\r\nSet-Cookie: x" } }
  - name: b
    direct_response: { status: 200 }
    response_headers: { set: { Content-Length: "0" }, add: { "Bad Name": x }, remove: ["x y"] }
  - name: c
    direct_response: { status: 200 }
    request_headers: { set: { Transfer-Encoding: chunked, host: other }, remove: [Content-Length] }
)");
  EXPECT_NE(e.find("routes[0].direct_response.headers.X-A: header value contains a control character"), std::string::npos) << e;
  EXPECT_NE(e.find("routes[1].response_headers.set.Content-Length: \"Content-Length\" is set by stealgate itself"),
            std::string::npos) << e;
  EXPECT_NE(e.find("routes[1].response_headers.add.Bad Name: \"Bad Name\" is not a header name"), std::string::npos) << e;
  EXPECT_NE(e.find("routes[1].response_headers.remove: \"x y\" is not a header name"), std::string::npos) << e;
  EXPECT_NE(e.find("routes[2].request_headers.remove: \"Content-Length\" is set by stealgate itself"),
            std::string::npos) << e;
  EXPECT_NE(e.find("routes[2].request_headers.set.Transfer-Encoding: \"Transfer-Encoding\" is set by stealgate"),
            std::string::npos) << e;
  EXPECT_NE(e.find("routes[2].request_headers.set.host: \"host\" is set by stealgate itself (use rewrite.host)"),
            std::string::npos) << e;
}

}  // namespace
}  // namespace sg::config
