// The admin endpoint, served by stealgate itself on the executor (default 127.0.0.1:9901,
// never public by default):
//   GET /metrics  Prometheus text format
//   GET /healthz  200 while the process runs
//   GET /ready    200 when the configuration is loaded and listeners are up, 503 while
//                 starting or draining
//   GET /config   the effective configuration (YAML), header values that look like
//                 credentials redacted
//   GET /debug/tasks      the scheduler and its live tasks as JSON (debug_tasks.h)
//   GET /debug/scheduler  a live page of the same (scheduler_page.h)
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "config/schema.h"
#include "exec/join_handle.h"
#include "io/tcp.h"
#include "metrics/process_stats.h"
#include "proxy/gateway.h"

namespace sg::admin {

class AdminServer {
 public:
  explicit AdminServer(proxy::Gateway& gw) : gw_(gw) {}
  ~AdminServer() { stop(); }
  // Binds and starts serving; returns an error message or "".
  std::string start(const config::Address& addr);
  void stop();
  uint16_t port() const { return port_; }
  bool inherited() const { return inherited_; }  // serving on an inherited socket
  int native_handle() const { return listener_ && listener_->is_open() ? listener_->native_handle() : -1; }

 private:
  proxy::Gateway& gw_;
  std::shared_ptr<io::TcpListener> listener_;
  exec::JoinHandle<void> task_;
  uint16_t port_ = 0;
  bool inherited_ = false;
};

// Exposed for tests: the response to one admin request.
// `process`: the process series for /metrics (read off the workers by the caller).
std::string admin_response(proxy::Gateway& gw, const std::string& method, const std::string& path, bool head,
                           std::string_view query = {},
                           const std::optional<metrics::ProcessStats>& process = std::nullopt);

}  // namespace sg::admin
