#include "upstream/health_checker.h"

#include <charconv>

#include "common/log.h"
#include "http/stream.h"

namespace sg::upstream {

exec::Task<bool> probe(io::IoContext ctx, const io::tcp::endpoint& ep, const config::HealthCheckSection& hc,
                       const std::string& host, const tls::ClientContext* tls, const std::string& server_name,
                       std::shared_ptr<io::TlsSessionSlot> session) {
  io::Deadline dl = io::Deadline::after(hc.timeout);
  auto conn = co_await io::TcpStream::connect(ctx, ep, dl);
  if (!conn.ok()) co_return false;
  io::Stream stream(std::move(*conn));
  if (tls != nullptr && co_await stream.connect_tls(tls->ctx(), server_name, dl, session)) co_return false;
  std::string req = "GET " + hc.path + " HTTP/1.1\r\nHost: " + host +
                    "\r\nUser-Agent: stealgate-health-check\r\nConnection: close\r\n\r\n";
  if (co_await stream.write_all(req, dl)) co_return false;
  http::ParserLimits lim;
  http::MessageReader reader(stream, http::Parser::Mode::kResponse, lim);
  for (bool sent = true;; sent = false) {
    http::HeadRead hr = co_await reader.read_head(dl, hc.timeout, nullptr, /*wait_first=*/sent);
    if (hr.status != http::ReadStatus::kOk) co_return false;
    int status = reader.parser().response().status;
    if (status >= 100 && status < 200) {
      auto fin = co_await reader.read_body(dl);
      if (fin.status != http::ReadStatus::kOk) co_return false;
      continue;
    }
    stream.close();
    co_return status >= hc.expected_status_min && status <= hc.expected_status_max;
  }
}

namespace {

exec::Task<void> check_loop(io::IoContext ctx, std::shared_ptr<Cluster> cluster,
                            std::shared_ptr<Endpoint> ep) {
  const config::HealthCheckSection& hc = cluster->config().health_check;
  std::string host = hc.host.empty() ? ep->name() : hc.host;
  uint32_t successes = 0, failures = 0;
  for (;;) {
    const tls::ClientContext* tls = cluster->tls();
    bool ok = co_await probe(ctx, ep->address(), hc, host, tls, tls != nullptr ? tls->server_name(ep->host()) : host,
                             ep->tls_session());
    if (ok) {
      failures = 0;
      ++successes;
      if (!ep->healthy.load(std::memory_order_relaxed) && successes >= hc.healthy_threshold) {
        ep->healthy.store(true, std::memory_order_relaxed);
        SG_LOG_INFO("cluster {}: endpoint {} is healthy again ({} passing checks)", cluster->name(), ep->name(),
                    successes);
      }
    } else {
      successes = 0;
      ++failures;
      if (ep->healthy.load(std::memory_order_relaxed) && failures >= hc.unhealthy_threshold) {
        ep->healthy.store(false, std::memory_order_relaxed);
        SG_LOG_WARN("cluster {}: endpoint {} is unhealthy ({} failed checks of {})", cluster->name(), ep->name(),
                    failures, hc.path);
      }
    }
    co_await io::sleep_for(hc.interval);
  }
}

}  // namespace

void HealthChecker::start(const std::vector<std::shared_ptr<Cluster>>& clusters) {
  std::vector<exec::JoinHandle<void>> next;
  for (const auto& c : clusters) {
    if (!c->config().health_check.enabled) {
      // Checks turned off: whatever they decided no longer applies.
      for (const auto& e : c->endpoints()) e->healthy.store(true, std::memory_order_relaxed);
      continue;
    }
    for (const auto& e : c->endpoints()) {
      if (!e->resolved()) continue;  // nothing to check until its name resolves (a new endpoint then)
      next.push_back(
          rt_.spawn(check_loop(rt_.context(), c, e), {exec::TaskKind::kHealthCheck, c->name() + " " + e->name()}));
    }
  }
  std::vector<exec::JoinHandle<void>> old;
  {
    std::lock_guard lk(mu_);
    old.swap(tasks_);
    tasks_ = std::move(next);
  }
  for (auto& t : old) t.cancel();
}

void HealthChecker::stop() {
  std::vector<exec::JoinHandle<void>> old;
  {
    std::lock_guard lk(mu_);
    old.swap(tasks_);
  }
  for (auto& t : old) t.cancel();
  for (auto& t : old) t.wait();
}

}  // namespace sg::upstream
