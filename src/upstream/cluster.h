// A cluster: the endpoints of one config snapshot, their load balancer, and passive
// outlier detection. Endpoint objects (pools, health, counters) are carried over from the
// previous snapshot's cluster of the same name when unchanged.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/latency_histogram.h"
#include "common/result.h"
#include "config/schema.h"
#include "tls/client_context.h"
#include "upstream/endpoint.h"
#include "upstream/load_balancer.h"

namespace sg::upstream {

struct ClusterStats {
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> connect_errors{0};
  std::atomic<uint64_t> connections_opened{0};  // by requests (not health checks)
  // TLS handshakes of those connections: [0] full, [1] resumed (a kept session).
  std::array<std::atomic<uint64_t>, 2> tls_handshakes{};
  std::atomic<uint64_t> timeouts{0};
  std::atomic<uint64_t> retries{0};
  std::atomic<uint64_t> retries_budget_exhausted{0};
  std::atomic<int64_t> retries_in_flight{0};
  std::atomic<uint64_t> no_healthy_endpoint{0};
  // Failures that would have ejected an endpoint, kept in by max_ejection_percent.
  std::atomic<uint64_t> ejections_refused{0};
  // Endpoint names looked up again (dns_refresh): lookups by outcome, and endpoints moved
  // to a new address (by a refresh or a reload).
  std::atomic<uint64_t> dns_lookups_ok{0};
  std::atomic<uint64_t> dns_lookups_failed{0};
  std::atomic<uint64_t> dns_moves{0};
  // Reused connections found closed by the upstream only after the request was sent (or
  // answered with its idle-timeout 408): the request was replayed on a new connection.
  std::atomic<uint64_t> stale_replays{0};
  // Response body bytes moved to the client by splice (io/splice.h), never copied through
  // the proxy's memory.
  std::atomic<uint64_t> response_bytes_spliced{0};
  std::atomic<int64_t> active{0};
  // Request head sent -> response head received (the upstream's own latency, retries
  // measured per attempt).
  AtomicHistogram response_head_time;
};

class Cluster {
 public:
  // Resolves endpoint names (blocking getaddrinfo: call it off the workers) and builds the
  // balancer. `previous` donates unchanged endpoints. `workers`: the runtime's worker
  // threads (each endpoint's pool keeps an idle list per worker). A name that does not
  // resolve keeps the address it had. A new one (no endpoint of that name in `previous`)
  // waits unresolved (Endpoint::unresolved) for the next lookup, at the start; it is an
  // error, which names the endpoint, with `new_names_must_resolve` (a reload: a typo must
  // not take an upstream's traffic away) or where names are not looked up again
  // (dns_refresh 0).
  static Result<std::shared_ptr<Cluster>> build(const config::ClusterSection& cfg, const Cluster* previous,
                                                std::size_t workers, std::string& error,
                                                bool new_names_must_resolve = false);

  const std::string& name() const { return cfg_.name; }
  const config::ClusterSection& config() const { return cfg_; }
  const std::vector<std::shared_ptr<Endpoint>>& endpoints() const { return endpoints_; }
  ClusterStats& stats() { return *stats_; }
  // TLS to the endpoints; null when the cluster speaks plain HTTP.
  const tls::ClientContext* tls() const { return tls_.get(); }

  // The endpoint for the next request, or nullptr when none is healthy and not ejected.
  // `ctx.exclude` (an index) is avoided when another endpoint is available; `ctx.avoid`
  // ones are never picked.
  Endpoint* pick(const PickContext& ctx, int* index = nullptr);
  // Whether an endpoint outside `avoid` could be picked now.
  bool has_available(uint64_t avoid) const;

  // Passive outlier detection: a failed attempt (connect failure, reset or malformed
  // response, timeout, 5xx) counts, any other response resets the count. At
  // consecutive_failures the endpoint is ejected (logged, counted), unless that would put
  // more than max_ejection_percent of the cluster out.
  void record_success(Endpoint& e);
  void record_failure(Endpoint& e);

  std::size_t healthy_count() const;

  // Looks the endpoints' names up again (blocking getaddrinfo: off the workers): true when
  // one's address is gone from the answer, or an unresolved one resolves, so a new build()
  // would move it. A failed lookup is logged and counts as no change.
  bool resolves_elsewhere() const;
  // Whether an endpoint is named by a host name rather than an IP literal.
  bool has_names() const { return has_names_; }
  // How long until the names are looked up again: dns_refresh (at least 100 ms), and at
  // most a second while an endpoint's name has not resolved yet (HAProxy retries a failed
  // resolution after its `timeout retry`, 1 s), so that an upstream service that starts
  // after the gateway gets requests within a second of its name appearing.
  std::chrono::milliseconds next_lookup_in() const;

 private:
  Cluster(config::ClusterSection cfg, std::vector<std::shared_ptr<Endpoint>> eps,
          std::shared_ptr<ClusterStats> stats);
  void eject(Endpoint& e, uint32_t failures);
  std::shared_ptr<Endpoint> endpoint_named(const std::string& name) const;

  // Makes counting the endpoints out and ejecting one a single step, so that concurrent
  // failures cannot together put out more than max_ejection_percent. Taken only once an
  // endpoint has failed consecutive_failures times in a row.
  std::mutex eject_mu_;
  bool has_names_ = false;
  config::ClusterSection cfg_;
  std::vector<std::shared_ptr<Endpoint>> endpoints_;
  std::unique_ptr<LoadBalancer> lb_;
  std::shared_ptr<ClusterStats> stats_;  // shared with the next snapshot's cluster
  std::shared_ptr<const tls::ClientContext> tls_;
};

// Resolves host:port (an IP literal, or getaddrinfo): every IPv4/IPv6 address, in the
// resolver's order.
Result<std::vector<io::tcp::endpoint>> resolve_all(const config::Address& a, std::string& error);
// The one address an endpoint uses: `keep` while the answer still holds it, else the first.
Result<io::tcp::endpoint> resolve(const config::Address& a, std::string& error,
                                  const io::tcp::endpoint* keep = nullptr);
bool is_ip_literal(const config::Address& a);

// What a start would find of `cfg`'s endpoint names, which the file alone cannot show
// (--check-config, systemd's ExecStartPre and ExecReload): each is looked up as the start
// does (blocking). A name that does not resolve is an error where it fails the start
// (dns_refresh 0), else a warning: the start takes it, unresolved, and a reload refuses
// it where the endpoint is new.
struct NameReport {
  std::vector<std::string> errors;
  std::vector<std::string> warnings;
};
NameReport look_up_names(const config::Config& cfg);

}  // namespace sg::upstream
