// Gateway statistics: plain atomics bumped on the data path (no lock, no map lookup per
// request: every handle is resolved when a snapshot is built) and read by the Prometheus
// collector at scrape time. Label sets are bounded: configured route/cluster/listener
// names, a fixed method list, status classes.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>

#include "common/latency_histogram.h"
#include "http/path.h"

namespace sg::proxy {

inline constexpr std::array<std::string_view, 9> kMethods = {"GET", "HEAD", "POST", "PUT", "DELETE",
                                                             "PATCH", "OPTIONS", "TRACE", "OTHER"};
std::size_t method_index(std::string_view m);

struct RouteStats {
  explicit RouteStats(std::string n) : name(std::move(n)) {}
  std::string name;
  // [method][status class 1..5]; class 0 = no response sent (client went away).
  std::array<std::array<std::atomic<uint64_t>, 6>, kMethods.size()> requests{};
  AtomicHistogram duration;
  std::atomic<uint64_t> rate_limited{0};  // refused with 429 by routes[].rate_limit
  void count(std::string_view method, int status, uint64_t duration_ns);
};

// Why a TLS handshake failed (io::TlsLayer::failure_kind), as a bounded label set.
inline constexpr std::array<std::string_view, 8> kTlsFailureKinds = {
    "timeout", "closed", "not_tls", "version", "cipher", "client_certificate", "peer_alert", "other"};
std::size_t tls_failure_index(std::string_view kind);
// Negotiated versions counted by name; anything else (never, with min_version 1.2) is "other".
inline constexpr std::array<std::string_view, 3> kTlsVersions = {"TLSv1.2", "TLSv1.3", "other"};
std::size_t tls_version_index(std::string_view version);

struct ListenerStats {
  std::atomic<uint64_t> connections_total{0};
  std::atomic<int64_t> connections_active{0};
  std::atomic<uint64_t> rejected_max_connections{0};
  std::atomic<uint64_t> accept_errors{0};
  std::atomic<uint64_t> proxy_header_errors{0};  // connections closed for their PROXY protocol header
  std::atomic<int64_t> proxy_header_logged_s{0};  // when the last of them was logged (steady, seconds)
  // Request paths rewritten by normalization, and requests refused for their path (or
  // Host), by http::PathError.
  std::atomic<uint64_t> paths_normalized{0};
  std::array<std::atomic<uint64_t>, http::kPathErrorCount> paths_rejected{};
  // TLS listeners: completed handshakes by version and whether the session was resumed,
  // failed ones by kind.
  std::array<std::array<std::atomic<uint64_t>, 2>, kTlsVersions.size()> tls_handshakes{};  // [version][resumed]
  std::array<std::atomic<uint64_t>, kTlsFailureKinds.size()> tls_failures{};
};

enum class RejectReason : uint8_t { kQueueFull = 0, kQueueTimeout = 1, kShed = 2 };
enum class Scope : uint8_t { kGlobal = 0, kRoute = 1, kCluster = 2 };

struct AdmissionStats {
  std::atomic<int64_t> in_flight{0};
  std::atomic<int64_t> queued{0};
  std::array<std::array<std::atomic<uint64_t>, 3>, 3> rejected{};  // [scope][reason]
  AtomicHistogram wait;
  void reject(Scope s, RejectReason r) {
    rejected[static_cast<std::size_t>(s)][static_cast<std::size_t>(r)].fetch_add(1, std::memory_order_relaxed);
  }
};

struct GatewayStats {
  std::atomic<uint64_t> reloads_ok{0};
  std::atomic<uint64_t> reloads_failed{0};
  std::atomic<int64_t> last_reload_success_unix{0};
  // Whether the last load of the file (at start or by a reload) succeeded. A rejected file
  // stays visible here until a good one loads: the next restart would fail on it.
  std::atomic<bool> last_reload_ok{false};
  void config_loaded() {  // at start and after an accepted reload
    last_reload_ok.store(true, std::memory_order_relaxed);
    last_reload_success_unix.store(static_cast<int64_t>(std::time(nullptr)), std::memory_order_relaxed);
  }
  void reload_accepted() {
    reloads_ok.fetch_add(1, std::memory_order_relaxed);
    config_loaded();
  }
  void reload_rejected() {
    reloads_failed.fetch_add(1, std::memory_order_relaxed);
    last_reload_ok.store(false, std::memory_order_relaxed);
  }
  std::atomic<uint64_t> downstream_requests{0};
  std::atomic<uint64_t> local_replies{0};
  std::atomic<uint64_t> upstream_requests{0};
  std::atomic<uint64_t> upstream_connect_errors{0};
  std::atomic<uint64_t> upstream_timeouts{0};
  // Upgrade requests whose protocol the route does not allow (forwarded without Upgrade),
  // and 101 responses for a protocol that was not offered (answered 502).
  std::atomic<uint64_t> upgrades_refused{0};
  std::atomic<uint64_t> upgrades_unexpected{0};
  AdmissionStats admission;
};

}  // namespace sg::proxy
