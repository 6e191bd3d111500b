#include "upstream/cluster.h"

#include <netdb.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "config/yaml_walk.h"

namespace sg::upstream {

namespace {

io::tcp::endpoint to_endpoint(const addrinfo& ai, uint16_t port) {
  if (ai.ai_family == AF_INET) {
    sockaddr_in sin;
    std::memcpy(&sin, ai.ai_addr, sizeof(sin));
    return {asio::ip::address_v4(ntohl(sin.sin_addr.s_addr)), port};
  }
  sockaddr_in6 sin6;
  std::memcpy(&sin6, ai.ai_addr, sizeof(sin6));
  asio::ip::address_v6::bytes_type b;
  std::memcpy(b.data(), &sin6.sin6_addr, 16);
  return {asio::ip::address_v6(b), port};
}

}  // namespace

bool is_ip_literal(const config::Address& a) {
  std::error_code ec;
  (void)asio::ip::make_address(a.host, ec);
  return !ec;
}

Result<std::vector<io::tcp::endpoint>> resolve_all(const config::Address& a, std::string& error) {
  std::error_code ec;
  auto ip = asio::ip::make_address(a.host, ec);
  if (!ec) return std::vector<io::tcp::endpoint>{io::tcp::endpoint(ip, a.port)};
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(a.host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    error = "cannot resolve \"" + a.host + "\": " + gai_strerror(rc);
    return std::make_error_code(std::errc::host_unreachable);
  }
  std::vector<io::tcp::endpoint> out;
  for (const addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    io::tcp::endpoint ep = to_endpoint(*ai, a.port);
    if (std::find(out.begin(), out.end(), ep) == out.end()) out.push_back(ep);
  }
  ::freeaddrinfo(res);
  if (out.empty()) {
    error = "cannot resolve \"" + a.host + "\": no IPv4 or IPv6 address";
    return std::make_error_code(std::errc::host_unreachable);
  }
  return out;
}

Result<io::tcp::endpoint> resolve(const config::Address& a, std::string& error, const io::tcp::endpoint* keep) {
  auto all = resolve_all(a, error);
  if (!all.ok()) return all.error();
  if (keep != nullptr && std::find(all->begin(), all->end(), *keep) != all->end()) return *keep;
  return all->front();
}

Cluster::Cluster(config::ClusterSection cfg, std::vector<std::shared_ptr<Endpoint>> eps,
                 std::shared_ptr<ClusterStats> stats)
    : cfg_(std::move(cfg)), endpoints_(std::move(eps)), stats_(std::move(stats)) {
  std::vector<uint32_t> weights;
  std::vector<std::string> names;
  for (const auto& e : endpoints_) {
    weights.push_back(e->weight());
    names.push_back(e->name());
    has_names_ = has_names_ || !is_ip_literal({e->host(), e->address().port()});
  }
  auto active = [this](int i) {
    return endpoints_[static_cast<std::size_t>(i)]->active.load(std::memory_order_relaxed);
  };
  lb_ = make_load_balancer(cfg_.lb, weights, active, names);
}

namespace {

std::string ip_text(const io::tcp::endpoint& ep) { return ep.address().to_string(); }

constexpr std::chrono::milliseconds kMinLookupInterval{100};
constexpr std::chrono::milliseconds kUnresolvedRetry{1000};

constexpr const char* kMustResolveAtLoad = " (with dns_refresh: 0 a name must resolve at load)";

std::chrono::milliseconds unresolved_retry(const config::ClusterSection& cfg) {
  return std::clamp<std::chrono::milliseconds>(cfg.dns_refresh, kMinLookupInterval, kUnresolvedRetry);
}

// The previous snapshot's endpoint of this name where it can go on (same address, weight
// and pool settings), else a new one. A name that does not resolve keeps the address it
// had. One that never resolved waits, unresolved and taking no requests, for the next
// lookup: a gateway starts though an upstream's name is not in DNS yet (a service that
// starts after it), where nginx refuses to. A new name must resolve where the caller says
// so (a reload, where the previous configuration can go on serving instead) and where names
// are not looked up again (dns_refresh 0).
Result<std::shared_ptr<Endpoint>> build_endpoint(const config::ClusterSection& cfg, const config::EndpointSection& e,
                                                 const std::shared_ptr<Endpoint>& before, bool pools_compatible,
                                                 bool new_names_must_resolve, const PoolOptions& pool,
                                                 ClusterStats& stats, std::string& error) {
  const bool had_address = before != nullptr && before->resolved();
  const bool same_settings = pools_compatible && before != nullptr && before->weight() == e.weight;
  // A name with several addresses keeps the one it has while the answer still holds it.
  auto addr = resolve(e.address, error, had_address ? &before->address() : nullptr);
  // Failures are logged when they start, here as in resolves_elsewhere(): a reload or a
  // rebuild while a name stays unresolvable says nothing new.
  if (!addr.ok() && had_address) {
    if (!before->lookup_failing.exchange(true, std::memory_order_relaxed)) {
      SG_LOG_WARN("cluster {}: endpoint {}: {}; it keeps {}", cfg.name, e.address.text(), error,
                  ip_text(before->address()));
    }
    addr = before->address();
  } else if (!addr.ok()) {
    const char* why = cfg.dns_refresh.count() == 0       ? kMustResolveAtLoad
                      : new_names_must_resolve && !before ? " (a new endpoint's name must resolve at a reload)"
                                                          : nullptr;
    if (why != nullptr) {
      error = "cluster \"" + cfg.name + "\" endpoint " + e.address.text() + ": " + error + why;
      return addr.error();
    }
    if (before == nullptr || !before->lookup_failing.exchange(true, std::memory_order_relaxed)) {
      SG_LOG_WARN("cluster {}: endpoint {}: {}; it takes no requests until the name resolves "
                  "(looked up again every {})",
                  cfg.name, e.address.text(), error, config::detail::format_duration(unresolved_retry(cfg)));
    }
    if (before != nullptr && same_settings) return before;
    return Endpoint::unresolved(e.address.text(), e.address.host, e.address.port, e.weight, pool);
  }
  if (before != nullptr && before->address() != *addr) {
    stats.dns_moves.fetch_add(1, std::memory_order_relaxed);
    if (had_address) {
      SG_LOG_WARN("cluster {}: endpoint {} now resolves to {} (was {}): a new pool and health state", cfg.name,
                  e.address.text(), ip_text(*addr), ip_text(before->address()));
    } else {
      SG_LOG_INFO("cluster {}: endpoint {} resolves to {}: it takes requests", cfg.name, e.address.text(),
                  ip_text(*addr));
    }
  }
  if (had_address && same_settings && before->address() == *addr) return before;
  return std::make_shared<Endpoint>(e.address.text(), e.address.host, *addr, e.weight, pool);
}

}  // namespace

Result<std::shared_ptr<Cluster>> Cluster::build(const config::ClusterSection& cfg, const Cluster* previous,
                                                std::size_t workers, std::string& error, bool new_names_must_resolve) {
  std::vector<std::shared_ptr<Endpoint>> eps;
  PoolOptions pool{cfg.max_idle_per_endpoint, cfg.idle_timeout, workers};
  // A pool's connections were made with the cluster's TLS settings: other settings get
  // other pools (pooled connections are keyed by TLS identity).
  const bool pools_compatible = previous != nullptr &&
                                previous->cfg_.max_idle_per_endpoint == cfg.max_idle_per_endpoint &&
                                previous->cfg_.idle_timeout == cfg.idle_timeout && previous->cfg_.tls == cfg.tls;
  auto stats = previous != nullptr ? previous->stats_ : std::make_shared<ClusterStats>();
  for (const auto& e : cfg.endpoints) {
    const std::shared_ptr<Endpoint> before = previous != nullptr ? previous->endpoint_named(e.address.text()) : nullptr;
    auto ep = build_endpoint(cfg, e, before, pools_compatible, new_names_must_resolve, pool, *stats, error);
    if (!ep.ok()) return ep.error();
    eps.push_back(std::move(*ep));
  }
  std::shared_ptr<const tls::ClientContext> tls;
  if (cfg.tls) {
    std::string why;
    tls = tls::ClientContext::build(*cfg.tls, why);
    if (!tls) {
      error = "cluster \"" + cfg.name + "\" tls: " + why;
      return std::make_error_code(std::errc::invalid_argument);
    }
    io::TlsLayer::enable_client_resumption(tls->ctx());  // into each endpoint's tls_session()
  }
  auto cluster = std::shared_ptr<Cluster>(new Cluster(cfg, std::move(eps), std::move(stats)));
  cluster->tls_ = std::move(tls);
  return cluster;
}

Endpoint* Cluster::pick(const PickContext& ctx, int* index) {
  int64_t now = steady_now_ms();
  int i = lb_->pick(ctx, [&](int k) {
    return (ctx.avoid & endpoint_bit(k)) == 0 && endpoints_[static_cast<std::size_t>(k)]->available(now);
  });
  if (i < 0) {
    stats_->no_healthy_endpoint.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  if (index != nullptr) *index = i;
  return endpoints_[static_cast<std::size_t>(i)].get();
}

void Cluster::record_success(Endpoint& e) { e.consecutive_failures.store(0, std::memory_order_relaxed); }

void Cluster::record_failure(Endpoint& e) {
  const uint32_t threshold = cfg_.outlier.consecutive_failures;
  if (threshold == 0) return;
  const uint32_t n = e.consecutive_failures.fetch_add(1, std::memory_order_relaxed) + 1;
  if (n >= threshold) eject(e, n);
}

void Cluster::eject(Endpoint& e, uint32_t failures) {
  const auto& od = cfg_.outlier;
  std::lock_guard lock(eject_mu_);
  const int64_t now = steady_now_ms();
  if (e.ejected(now)) return;
  std::size_t out = 0;
  for (const auto& p : endpoints_) out += p->ejected(now) ? 1 : 0;
  if ((out + 1) * 100 > static_cast<std::size_t>(od.max_ejection_percent) * endpoints_.size()) {
    stats_->ejections_refused.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // Envoy's rule: the n-th recent ejection lasts n x base (capped), and each base period
  // the endpoint has served since its last ejection ended forgives one. So a flap last
  // week does not cost a full max_ejection_time today.
  const int64_t base = std::max<int64_t>(od.base_ejection_time.count(), 1);
  const int64_t served = now - e.ejected_until_ms.load(std::memory_order_relaxed);
  const uint64_t forgiven = static_cast<uint64_t>(std::max<int64_t>(served, 0) / base);
  const uint32_t prior = e.ejection_multiplier.load(std::memory_order_relaxed);
  const uint32_t multiplier = static_cast<uint32_t>(prior > forgiven ? prior - forgiven : 0) + 1;
  const int64_t ms = std::min<int64_t>(base * multiplier, std::max<int64_t>(od.max_ejection_time.count(), base));
  e.ejection_multiplier.store(multiplier, std::memory_order_relaxed);
  e.ejected_until_ms.store(now + ms, std::memory_order_relaxed);
  e.consecutive_failures.store(0, std::memory_order_relaxed);
  e.stats().ejections.fetch_add(1, std::memory_order_relaxed);
  SG_LOG_WARN("cluster {}: endpoint {} ejected for {} after {} failed attempts in a row ({} of {} endpoints out)",
              cfg_.name, e.name(), config::detail::format_duration(config::Duration{ms}), failures, out + 1,
              endpoints_.size());
}

bool Cluster::has_available(uint64_t avoid) const {
  int64_t now = steady_now_ms();
  for (std::size_t i = 0; i < endpoints_.size(); ++i) {
    if ((avoid & endpoint_bit(static_cast<int>(i))) == 0 && endpoints_[i]->available(now)) return true;
  }
  return false;
}

std::shared_ptr<Endpoint> Cluster::endpoint_named(const std::string& name) const {
  for (const auto& e : endpoints_) {
    if (e->name() == name) return e;
  }
  return nullptr;
}

bool Cluster::resolves_elsewhere() const {
  for (const auto& e : endpoints_) {
    const config::Address a{e->host(), e->address().port()};
    if (is_ip_literal(a)) continue;
    std::string error;
    auto all = resolve_all(a, error);
    (all.ok() ? stats_->dns_lookups_ok : stats_->dns_lookups_failed).fetch_add(1, std::memory_order_relaxed);
    // Failures are logged when they start, not at each lookup (every second while a name
    // has not resolved yet); the counter has each.
    if (!all.ok()) {
      if (!e->lookup_failing.exchange(true, std::memory_order_relaxed)) {
        SG_LOG_WARN("cluster {}: endpoint {}: {}; {}", cfg_.name, e->name(), error,
                    e->resolved() ? "it keeps " + ip_text(e->address()) : std::string("it takes no requests yet"));
      }
      continue;
    }
    if (e->lookup_failing.exchange(false, std::memory_order_relaxed) && e->resolved()) {
      SG_LOG_INFO("cluster {}: endpoint {}: its name resolves again", cfg_.name, e->name());
    }
    if (!e->resolved() || std::find(all->begin(), all->end(), e->address()) == all->end()) return true;
  }
  return false;
}

std::chrono::milliseconds Cluster::next_lookup_in() const {
  const bool waiting = std::any_of(endpoints_.begin(), endpoints_.end(), [](const auto& e) { return !e->resolved(); });
  return waiting ? unresolved_retry(cfg_) : std::max(cfg_.dns_refresh, kMinLookupInterval);
}

std::size_t Cluster::healthy_count() const {
  int64_t now = steady_now_ms();
  return static_cast<std::size_t>(std::count_if(endpoints_.begin(), endpoints_.end(),
                                                [&](const auto& e) { return e->available(now); }));
}

NameReport look_up_names(const config::Config& cfg) {
  NameReport out;
  for (const auto& c : cfg.clusters) {
    for (const auto& e : c.endpoints) {
      std::string error;
      if (resolve_all(e.address, error).ok()) continue;
      const std::string what = "cluster \"" + c.name + "\" endpoint " + e.address.text() + ": " + error;
      if (c.dns_refresh.count() == 0) {
        out.errors.push_back(what + kMustResolveAtLoad);
      } else {
        out.warnings.push_back(what + "; it gets no requests until the name resolves (a reload that adds it is "
                                      "refused)");
      }
    }
  }
  return out;
}

}  // namespace sg::upstream
