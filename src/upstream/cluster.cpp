#include "upstream/cluster.h"

#include <netdb.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "config/yaml_walk.h"

namespace sg::upstream {

Result<io::tcp::endpoint> resolve(const config::Address& a, std::string& error) {
  std::error_code ec;
  auto ip = asio::ip::make_address(a.host, ec);
  if (!ec) return io::tcp::endpoint(ip, a.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(a.host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    error = "cannot resolve \"" + a.host + "\": " + gai_strerror(rc);
    return std::make_error_code(std::errc::host_unreachable);
  }
  io::tcp::endpoint ep;
  if (res->ai_family == AF_INET) {
    sockaddr_in sin;
    std::memcpy(&sin, res->ai_addr, sizeof(sin));
    ep = io::tcp::endpoint(asio::ip::address_v4(ntohl(sin.sin_addr.s_addr)), a.port);
  } else {
    sockaddr_in6 sin6;
    std::memcpy(&sin6, res->ai_addr, sizeof(sin6));
    asio::ip::address_v6::bytes_type b;
    std::memcpy(b.data(), &sin6.sin6_addr, 16);
    ep = io::tcp::endpoint(asio::ip::address_v6(b), a.port);
  }
  ::freeaddrinfo(res);
  return ep;
}

Cluster::Cluster(config::ClusterSection cfg, std::vector<std::shared_ptr<Endpoint>> eps,
                 std::shared_ptr<ClusterStats> stats)
    : cfg_(std::move(cfg)), endpoints_(std::move(eps)), stats_(std::move(stats)) {
  std::vector<uint32_t> weights;
  std::vector<std::string> names;
  for (const auto& e : endpoints_) {
    weights.push_back(e->weight());
    names.push_back(e->name());
  }
  lb_ = make_load_balancer(
      cfg_.lb, weights, [this](int i) { return endpoints_[static_cast<std::size_t>(i)]->active.load(std::memory_order_relaxed); },
      names);
}

Result<std::shared_ptr<Cluster>> Cluster::build(const config::ClusterSection& cfg, const Cluster* previous,
                                                std::size_t workers, std::string& error) {
  std::vector<std::shared_ptr<Endpoint>> eps;
  PoolOptions pool{cfg.max_idle_per_endpoint, cfg.idle_timeout, workers};
  for (const auto& e : cfg.endpoints) {
    auto addr = resolve(e.address, error);
    if (!addr.ok()) {
      error = "cluster \"" + cfg.name + "\" endpoint " + e.address.text() + ": " + error;
      return addr.error();
    }
    std::shared_ptr<Endpoint> reuse;
    // A pool's connections were made with the cluster's TLS settings: other settings get
    // other pools (pooled connections are keyed by TLS identity).
    if (previous != nullptr && previous->cfg_.max_idle_per_endpoint == cfg.max_idle_per_endpoint &&
        previous->cfg_.idle_timeout == cfg.idle_timeout && previous->cfg_.tls == cfg.tls) {
      for (const auto& p : previous->endpoints_) {
        if (p->name() == e.address.text() && p->address() == *addr && p->weight() == e.weight) reuse = p;
      }
    }
    eps.push_back(reuse ? reuse : std::make_shared<Endpoint>(e.address.text(), e.address.host, *addr, e.weight, pool));
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
  auto stats = previous != nullptr ? previous->stats_ : std::make_shared<ClusterStats>();
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

std::size_t Cluster::healthy_count() const {
  int64_t now = steady_now_ms();
  return static_cast<std::size_t>(std::count_if(endpoints_.begin(), endpoints_.end(),
                                                [&](const auto& e) { return e->available(now); }));
}

}  // namespace sg::upstream
