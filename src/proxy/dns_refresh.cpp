// Endpoint names looked up again while serving (clusters[].dns_refresh). A name resolved
// only at load keeps an address its owner may have handed to someone else (a cloud load
// balancer's addresses rotate; a Kubernetes service's pods come and go), until somebody
// reloads: nginx's best-known surprise. HAProxy's resolvers and Envoy's STRICT_DNS
// clusters look again; so does this, on the control path, like a reload: the lookups
// block, so they run on a thread of their own, never a worker.
//
// An endpoint moves only when its address is gone from the answer (a name with several
// addresses keeps the one it has while it is still there: no churn of pools and health
// state with a resolver that rotates its answers), and a failed lookup keeps the address.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "common/log.h"
#include "proxy/gateway.h"

namespace sg::proxy {

void Gateway::dns_refresh_loop(std::stop_token stop) {
  // An idle gateway with no names to look up sleeps until a reload brings some.
  auto next = refresh_dns();  // (schedules the first lookups: the start just made them)
  for (;;) {
    {
      std::unique_lock lk(dns_wait_mu_);
      const auto woken = [&] { return stop.stop_requested() || dns_config_changed_; };
      if (next == std::chrono::steady_clock::time_point::max()) {
        dns_wait_.wait(lk, stop, woken);
      } else {
        dns_wait_.wait_until(lk, stop, next, woken);
      }
      if (stop.stop_requested()) return;
      dns_config_changed_ = false;
    }
    next = refresh_dns();
  }
}

void Gateway::wake_dns_refresh() {
  {
    std::lock_guard lk(dns_wait_mu_);
    dns_config_changed_ = true;
  }
  dns_wait_.notify_all();
}

void Gateway::stop_dns_refresh() {
  if (!dns_thread_.joinable()) return;
  dns_thread_.request_stop();
  dns_thread_.join();
}

std::chrono::steady_clock::time_point Gateway::refresh_dns() {
  auto next = std::chrono::steady_clock::time_point::max();
  const std::shared_ptr<const Snapshot> old = snapshot();
  if (!old || draining()) return next;
  // The lookups first, without the control lock (a reload meanwhile is not held up)...
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::string> moved;
  for (const auto& c : old->clusters) {
    if (c->config().dns_refresh.count() == 0 || !c->has_names()) continue;
    const auto interval = c->next_lookup_in();
    // A cluster seen for the first time was resolved just now, by the start or a reload.
    auto [it, first] = dns_due_.try_emplace(c->name(), now + interval);
    if (!first && now >= it->second) {
      it->second = now + interval;
      if (c->resolves_elsewhere()) moved.push_back(c->name());
    }
    next = std::min(next, it->second);
  }
  if (moved.empty()) return next;
  // ...then the rebuild, against the snapshot serving now: a reload in between may have
  // rebuilt (or removed) the cluster already.
  std::lock_guard lk(control_mu_);
  const std::shared_ptr<const Snapshot> cur = snapshot();
  if (draining()) return next;
  auto snap = std::make_shared<Snapshot>(*cur);
  bool changed = false;
  for (auto& c : snap->clusters) {
    if (std::find(moved.begin(), moved.end(), c->name()) == moved.end()) continue;
    std::string err;
    auto built = upstream::Cluster::build(c->config(), c.get(), rt_.exec().config().worker_threads, err);
    if (!built.ok()) {
      SG_LOG_WARN("cluster {}: DNS refresh: {}; its endpoints keep their addresses", c->name(), err);
      continue;
    }
    c = std::move(*built);
    changed = true;
  }
  if (!changed) return next;
  std::string err;
  auto table = routing::RouteTable::build(*snap->config, snap->clusters, err);
  if (!table.ok()) {  // cannot happen: the same config built it before
    SG_LOG_ERROR("DNS refresh: {}; the previous endpoints keep serving", err);
    return next;
  }
  snap->routes = std::move(*table);
  snap_.store(snap, std::memory_order_release);
  health_.start(snap->clusters);
  return next;
}

}  // namespace sg::proxy
