// An upstream endpoint: resolved address, weight, live counters, health, keep-alive pool,
// and the TLS session it last issued. Shared (shared_ptr) between config snapshots while
// its definition (and its cluster's TLS settings) is unchanged, so a reload keeps warm
// connections, resumable sessions and health state.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "upstream/conn_pool.h"

namespace sg::upstream {

// Exported per endpoint (stealgate_upstream_endpoint_*): which endpoint of a cluster fails.
struct EndpointStats {
  std::atomic<uint64_t> requests{0};  // attempts sent to it (a retry elsewhere counts there)
  std::atomic<uint64_t> connect_errors{0};
  std::atomic<uint64_t> timeouts{0};
  // Final responses by status class: [0] 1xx (a 101 switch) ... [4] 5xx.
  std::array<std::atomic<uint64_t>, 5> responses{};
  std::atomic<uint64_t> ejections{0};

  void count_response(int status) {
    if (status >= 100 && status <= 599) {
      responses[static_cast<std::size_t>(status / 100 - 1)].fetch_add(1, std::memory_order_relaxed);
    }
  }
};

class Endpoint {
 public:
  Endpoint(std::string name, std::string host, io::tcp::endpoint addr, uint32_t weight, PoolOptions pool)
      : name_(std::move(name)), host_(std::move(host)), addr_(addr), weight_(weight), pool_(pool) {}
  // A name that did not resolve (yet): the endpoint takes no requests and no health checks
  // until a later lookup gives it an address (a new Endpoint, Cluster::build).
  static std::shared_ptr<Endpoint> unresolved(std::string name, std::string host, uint16_t port, uint32_t weight,
                                              PoolOptions pool) {
    auto e = std::make_shared<Endpoint>(std::move(name), std::move(host), io::tcp::endpoint({}, port), weight, pool);
    e->resolved_ = false;
    e->lookup_failing.store(true, std::memory_order_relaxed);  // (the build that made it said so)
    return e;
  }

  const std::string& name() const { return name_; }  // host:port as configured
  const std::string& host() const { return host_; }  // the host as configured (a name or an IP literal)
  bool resolved() const { return resolved_; }
  // Unresolved: the unspecified address with the configured port.
  const io::tcp::endpoint& address() const { return addr_; }
  uint32_t weight() const { return weight_; }
  ConnPool& pool() { return pool_; }
  // The session new TLS connections to this endpoint offer to resume (see io/tls.h).
  const std::shared_ptr<io::TlsSessionSlot>& tls_session() const { return tls_session_; }
  EndpointStats& stats() { return stats_; }

  // Requests in flight to this endpoint (least_request balancing, metrics).
  std::atomic<int64_t> active{0};

  // Active health checking: false after `unhealthy_threshold` failed checks.
  std::atomic<bool> healthy{true};
  // Passive outlier detection (Cluster::record_failure).
  std::atomic<uint32_t> consecutive_failures{0};
  // Steady-clock ms: the end of the current ejection, or of the last one once past.
  std::atomic<int64_t> ejected_until_ms{0};
  // Recent ejections: the next one lasts base_ejection_time x (this + 1), less one for each
  // base time served since the last (Cluster::eject, under the ejecting cluster's lock; a
  // reload's two snapshots have a lock each, and either may eject meanwhile).
  std::atomic<uint32_t> ejection_multiplier{0};
  // Its name's last lookup failed (clusters[].dns_refresh): said once in the log when the
  // lookups start failing, not at each one.
  std::atomic<bool> lookup_failing{false};

  bool ejected(int64_t now_ms) const { return ejected_until_ms.load(std::memory_order_relaxed) > now_ms; }
  bool available(int64_t now_ms) const {
    return resolved_ && healthy.load(std::memory_order_relaxed) && !ejected(now_ms);
  }

 private:
  std::string name_;
  std::string host_;
  io::tcp::endpoint addr_;
  bool resolved_ = true;
  uint32_t weight_;
  ConnPool pool_;
  std::shared_ptr<io::TlsSessionSlot> tls_session_ = std::make_shared<io::TlsSessionSlot>();
  EndpointStats stats_;
};

inline int64_t steady_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(exec::tick_now().time_since_epoch())
      .count();
}

}  // namespace sg::upstream
