#include "proxy/stats.h"

namespace sg::proxy {

std::size_t method_index(std::string_view m) {
  for (std::size_t i = 0; i + 1 < kMethods.size(); ++i) {
    if (m == kMethods[i]) return i;
  }
  return kMethods.size() - 1;
}

void RouteStats::count(std::string_view method, int status, uint64_t duration_ns) {
  std::size_t cls = (status >= 100 && status < 600) ? static_cast<std::size_t>(status / 100) : 0;
  requests[method_index(method)][cls].fetch_add(1, std::memory_order_relaxed);
  duration.observe(duration_ns);
}

std::size_t tls_failure_index(std::string_view kind) {
  for (std::size_t i = 0; i < kTlsFailureKinds.size(); ++i) {
    if (kTlsFailureKinds[i] == kind) return i;
  }
  return kTlsFailureKinds.size() - 1;
}

std::size_t tls_version_index(std::string_view version) {
  for (std::size_t i = 0; i + 1 < kTlsVersions.size(); ++i) {
    if (kTlsVersions[i] == version) return i;
  }
  return kTlsVersions.size() - 1;
}

}  // namespace sg::proxy
