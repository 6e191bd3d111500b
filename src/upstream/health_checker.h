// Active HTTP health checks: one executor task per endpoint of every cluster that enables
// them. Each probe connects, sends `GET <path>` (Connection: close) and reads the status
// line within `timeout`; a status in the expected range is a success. An endpoint turns
// unhealthy after `unhealthy_threshold` consecutive failures and healthy again after
// `healthy_threshold` consecutive successes. Endpoints start healthy, so a fresh start or
// reload does not answer 503 before the first probes ran.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "exec/join_handle.h"
#include "io/runtime.h"
#include "upstream/cluster.h"

namespace sg::upstream {

class HealthChecker {
 public:
  explicit HealthChecker(io::Runtime& rt) : rt_(rt) {}
  ~HealthChecker() { stop(); }

  // Replaces the running checks with checks of `clusters` (called on start and reload).
  void start(const std::vector<std::shared_ptr<Cluster>>& clusters);
  void stop();

 private:
  io::Runtime& rt_;
  std::mutex mu_;
  std::vector<exec::JoinHandle<void>> tasks_;
};

// One probe (exposed for tests). True when the endpoint answered with an expected status.
exec::Task<bool> probe(io::IoContext ctx, const io::tcp::endpoint& ep, const config::HealthCheckSection& hc,
                       const std::string& host, const tls::ClientContext* tls, const std::string& server_name,
                       std::shared_ptr<io::TlsSessionSlot> session = nullptr);

}  // namespace sg::upstream
