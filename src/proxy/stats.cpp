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

}  // namespace sg::proxy
