// The section tables drive the loader, the printer and the reference: config/README.md
// holds exactly the generated tables, every key has a meaning, and every key a file sets
// comes back out of --print-config and loads back to the same configuration.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "config/loader.h"
#include "config/sections.h"

namespace sg::config {
namespace {

std::map<std::string, std::string> blocks_of(const std::string& text) {
  static const std::regex block("<!-- config table: (.+?) -->\n[^]*?<!-- end of config table -->\n");
  std::map<std::string, std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), block); it != std::sregex_iterator(); ++it) {
    EXPECT_TRUE(out.emplace((*it)[1].str(), it->str()).second) << "two blocks for " << (*it)[1].str();
  }
  return out;
}

TEST(ConfigReference, ReadmeHoldsTheGeneratedTables) {
  const char* root = std::getenv("SG_SOURCE_ROOT");
  ASSERT_NE(root, nullptr) << "meson sets SG_SOURCE_ROOT for this test";
  std::ifstream f(std::string(root) + "/config/README.md");
  ASSERT_TRUE(f) << "cannot read config/README.md";
  std::stringstream readme;
  readme << f.rdbuf();
  const auto documented = blocks_of(readme.str());
  const auto generated = blocks_of(config_reference());
  ASSERT_GE(generated.size(), 20u);
  for (const auto& [name, block] : generated) {
    auto it = documented.find(name);
    ASSERT_NE(it, documented.end()) << "config/README.md lacks the table \"" << name
                                    << "\": add its marker lines and run scripts/config-reference.py";
    EXPECT_EQ(it->second, block) << "config/README.md's table \"" << name
                                 << "\" is out of date: run scripts/config-reference.py";
  }
  for (const auto& [name, block] : documented) {
    EXPECT_TRUE(generated.count(name)) << "config/README.md documents \"" << name << "\", which does not exist";
  }
}

TEST(ConfigReference, EveryKeyHasAMeaningAndADefault) {
  for (const detail::ReferenceTable& t : detail::reference_tables()) {
    std::set<std::string> keys;
    for (const detail::ReferenceRow& r : t.rows) {
      EXPECT_TRUE(keys.insert(r.key).second) << t.name << "." << r.key << " twice";
      EXPECT_FALSE(r.doc.empty()) << t.name << "." << r.key << " has no meaning";
      EXPECT_FALSE(r.shown_default.empty()) << t.name << "." << r.key << " has no default";
    }
  }
}

// Every key of a file that sets (nearly) all of them, with values that are not the defaults.
const char* kEveryKey = R"(runtime:
  worker_threads: 3
  io_driver: epoll
  global_queue_interval: 31
  adaptive_global_queue_interval: true
  event_interval: 17
  coop_budget: 64
  max_lifo_polls_per_tick: 2
  max_blocking_threads: 8
  task_diagnostics: false
  long_poll_threshold: 25ms
admin: { enabled: false, address: "127.0.0.1:9911" }
listeners:
  - name: public
    address: 127.0.0.1:8080
    backlog: 10
    reuse_port: true
    max_connections: 5
    on_max_connections: backlog
    header_timeout: 2s
    idle_timeout: 3s
    body_timeout: 4s
    send_timeout: 5s
    max_target_bytes: 4KiB
    max_header_bytes: 9000
    max_headers: 10
    max_body_bytes: 1MiB
    proxy_protocol: true
    trusted_proxies: [10.0.0.0/8]
    path_normalization: reject
    escaped_slashes: decode
    backslashes: reject
limits:
  max_concurrent_requests: 7
  max_queued_requests: 8
  queue_timeout: 9ms
  retry_after: 3s
  lifo_after: 5ms
  shed_target: 6ms
  shed_interval: 7ms
clusters:
  - name: api
    endpoints: [127.0.0.1:9000, { address: 127.0.0.1:9001, weight: 3 }]
    lb: ring_hash
    hash_header: X-User
    connect_timeout: 2s
    max_idle_per_endpoint: 4
    idle_timeout: 9s
    max_concurrent_requests: 11
    health_check:
      enabled: true
      path: /ping
      host: health.local
      interval: 2s
      timeout: 300ms
      healthy_threshold: 4
      unhealthy_threshold: 5
      expected_status: 200-204
    outlier_detection:
      consecutive_failures: 2
      base_ejection_time: 1s
      max_ejection_time: 10s
      max_ejection_percent: 30
routes:
  - name: api
    match:
      host: "*.example.com"
      path_prefix: /v1/
      methods: [GET, POST]
      headers: { X-Env: prod, X-Debug: ~ }
      query: [{ name: debug, value: "1" }]
      listener: [public]
      source: [10.0.0.0/8, "2001:db8::/32"]
    cluster: api
    rewrite: { strip_prefix: /v1, host: api.internal }
    request_headers: { add: { X-A: a }, set: { X-B: b }, remove: [X-C] }
    response_headers: { add: { X-D: d }, set: { X-E: e }, remove: [X-F] }
    timeout: 2s
    retries: { attempts: 2, on: [reset, 5xx], budget_percent: 10, min_retry_concurrency: 1 }
    max_concurrent_requests: 12
    rate_limit: { rate: 600/m, burst: 4, key: "header:X-Api-Key", max_keys: 5000 }
    upgrades: []
  - name: exact
    match: { path: /x, path_regex: "" }
    rewrite: { path: /y }
    direct_response: { status: 204, body: none, headers: { X-G: g } }
  - name: moved
    match: { path_regex: "^/old/.*" }
    redirect: { status: 301, location: "https://example.com/" }
logging:
  level: debug
  format: json
  access_log: { enabled: false, path: /tmp/access.log, format: json }
  queue_size: 64
drain_timeout: 5s
drain_idle_grace: 1s
)";

// "routes[].match.headers" for each key of a mapping, recursively (list items as "[]").
void collect_keys(const YAML::Node& n, const std::string& path, std::set<std::string>& out) {
  if (n.IsSequence()) {
    for (const auto& item : n) collect_keys(item, path + "[]", out);
  } else if (n.IsMap()) {
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string key = path.empty() ? it->first.Scalar() : path + "." + it->first.Scalar();
      out.insert(key);
      if (key.find(".headers") == std::string::npos && key.find("_headers.") == std::string::npos) {
        collect_keys(it->second, key, out);  // not into header names: they are values
      }
    }
  }
}

TEST(ConfigReference, EveryKeyReadIsPrintedAndLoadsBackTheSame) {
  LoadResult r = load_string(kEveryKey, "every.yaml");
  ASSERT_TRUE(r.ok()) << r.error_text();
  const std::string printed = to_yaml(*r.config);
  std::set<std::string> written, shown;
  collect_keys(YAML::Load(kEveryKey), "", written);
  collect_keys(YAML::Load(printed), "", shown);
  written.erase("routes[].match.path_regex");  // the empty one is "not set", and printed as such
  shown.erase("routes[].match.path_regex");
  for (const std::string& key : written) EXPECT_TRUE(shown.count(key)) << key << " is read but not printed:\n" << printed;
  LoadResult again = load_string(printed, "printed.yaml");
  ASSERT_TRUE(again.ok()) << again.error_text() << printed;
  EXPECT_EQ(to_yaml(*again.config), printed);
  const Config& c = *again.config;
  EXPECT_EQ(c.runtime.worker_threads, 3u);
  EXPECT_EQ(c.listeners[0].max_target_bytes, 4096u);
  EXPECT_EQ(c.listeners[0].path.backslashes, http::SlashPolicy::kReject);
  EXPECT_EQ(c.limits.retry_after_seconds, 3u);
  EXPECT_EQ(c.clusters[0].health_check.expected_status_max, 204);
  EXPECT_EQ(c.clusters[0].endpoints[1].weight, 3u);
  EXPECT_TRUE(c.routes[0].upgrades.empty());
  EXPECT_EQ(c.routes[0].retries.on.size(), 2u);
  EXPECT_EQ(c.routes[1].rewrite_path, "/y");
  EXPECT_EQ(c.logging.access_log_path, "/tmp/access.log");
  EXPECT_FALSE(c.logging.access_log);
}

TEST(ConfigReference, ChoicesNameTheirWordsAndSuggestOne) {
  LoadResult r = load_string("listeners: [{ address: 127.0.0.1:1, tls: ~ }]\nlogging: { level: debg }\n", "a.yaml");
  ASSERT_FALSE(r.ok());
  const std::string e = r.error_text();
  EXPECT_NE(e.find("logging.level: expected trace | debug | info | warning | error | critical | off, got \"debg\" "
                   "(did you mean \"debug\"?)"), std::string::npos) << e;
  // An empty tls section is still a TLS listener, and one needs a certificate.
  EXPECT_NE(e.find("listeners[0].tls.certificates: a TLS listener needs at least one certificate"), std::string::npos)
      << e;
}

}  // namespace
}  // namespace sg::config
