// Load balancing over an immutable endpoint list. pick() returns the index of the endpoint
// for the next request among those for which `usable(i)` holds, or -1; `exclude` lets a
// retry go to a different endpoint when there is one. Policies keep only lock-free state
// (atomic counters), so picking never takes a lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "common/function_ref.h"
#include "config/schema.h"

namespace sg::upstream {

struct PickContext {
  uint64_t hash = 0;  // ring_hash key hash (header value or client address)
  int exclude = -1;   // endpoint index to avoid (previous attempt)
  // Endpoints (bit i = index i, the first 64) never to pick: those a connect failure of this
  // request already tried. Applied by Cluster::pick as part of "usable".
  uint64_t avoid = 0;
};

inline uint64_t endpoint_bit(int i) { return i >= 0 && i < 64 ? uint64_t{1} << i : 0; }

class LoadBalancer {
 public:
  virtual ~LoadBalancer() = default;
  virtual int pick(const PickContext& ctx, FunctionRef<bool(int)> usable) = 0;
};

// Builds the policy for endpoints with `weights`; `active` gives in-flight counts
// (least_request), `names` the stable identities hashed onto the ring (ring_hash).
std::unique_ptr<LoadBalancer> make_load_balancer(config::LbPolicy policy, const std::vector<uint32_t>& weights,
                                                 std::function<int64_t(int)> active,
                                                 const std::vector<std::string>& names);

uint64_t hash64(std::string_view s);

}  // namespace sg::upstream
