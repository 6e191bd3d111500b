#include "upstream/load_balancer.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace sg::upstream {

uint64_t hash64(std::string_view s) {
  // FNV-1a, then a murmur3 finaliser so that neighbouring inputs spread over the ring.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

namespace {

uint64_t thread_random() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

// Walks from `start` to the first usable index that is not excluded, falling back to the
// excluded one when it is the only usable endpoint.
int first_usable(int start, int n, const PickContext& ctx, FunctionRef<bool(int)> usable) {
  int fallback = -1;
  for (int k = 0; k < n; ++k) {
    int i = (start + k) % n;
    if (!usable(i)) continue;
    if (i == ctx.exclude) {
      fallback = i;
      continue;
    }
    return i;
  }
  return fallback;
}

// Smooth weighted round robin (nginx's algorithm), precomputed into a schedule once, so
// picking is one atomic increment: weights {5,1,1} give a,a,b,a,c,a,a rather than
// a,a,a,a,a,b,c.
class RoundRobin final : public LoadBalancer {
 public:
  explicit RoundRobin(const std::vector<uint32_t>& weights) : n_(static_cast<int>(weights.size())) {
    uint32_t g = 0;
    for (uint32_t w : weights) g = std::gcd(g, w);
    std::vector<int64_t> cur(weights.size(), 0);
    int64_t total = 0;
    for (uint32_t w : weights) total += w / g;
    for (int64_t step = 0; step < total; ++step) {
      std::size_t best = 0;
      for (std::size_t i = 0; i < weights.size(); ++i) {
        cur[i] += weights[i] / g;
        if (cur[i] > cur[best]) best = i;
      }
      cur[best] -= total;
      schedule_.push_back(static_cast<int>(best));
    }
  }
  int pick(const PickContext& ctx, FunctionRef<bool(int)> usable) override {
    if (schedule_.empty()) return -1;
    uint64_t k = next_.fetch_add(1, std::memory_order_relaxed);
    int start = schedule_[k % schedule_.size()];
    return first_usable(start, n_, ctx, usable);
  }

 private:
  int n_;
  std::vector<int> schedule_;
  std::atomic<uint64_t> next_{0};
};

// Weighted random.
class Random final : public LoadBalancer {
 public:
  explicit Random(const std::vector<uint32_t>& weights) {
    uint64_t acc = 0;
    for (uint32_t w : weights) {
      acc += w;
      prefix_.push_back(acc);
    }
  }
  int pick(const PickContext& ctx, FunctionRef<bool(int)> usable) override {
    if (prefix_.empty()) return -1;
    uint64_t r = thread_random() % prefix_.back();
    int start = static_cast<int>(std::upper_bound(prefix_.begin(), prefix_.end(), r) - prefix_.begin());
    return first_usable(start, static_cast<int>(prefix_.size()), ctx, usable);
  }

 protected:
  std::vector<uint64_t> prefix_;
};

// Power of two choices: two weighted-random candidates, the one with fewer requests in
// flight (relative to its weight) wins.
class LeastRequest final : public LoadBalancer {
 public:
  LeastRequest(const std::vector<uint32_t>& weights, std::function<int64_t(int)> active)
      : weights_(weights), random_(weights), active_(std::move(active)) {}
  int pick(const PickContext& ctx, FunctionRef<bool(int)> usable) override {
    int a = random_.pick(ctx, usable);
    if (a < 0) return -1;
    PickContext second = ctx;
    second.exclude = a;
    int b = random_.pick(second, [&](int i) { return usable(i) && i != ctx.exclude; });
    if (b < 0 || b == a) return a;
    // Compare active/weight without division: a_active * w_b vs b_active * w_a.
    int64_t la = active_(a) * static_cast<int64_t>(weights_[static_cast<std::size_t>(b)]);
    int64_t lb = active_(b) * static_cast<int64_t>(weights_[static_cast<std::size_t>(a)]);
    return lb < la ? b : a;
  }

 private:
  std::vector<uint32_t> weights_;
  Random random_;
  std::function<int64_t(int)> active_;
};

// Consistent hashing (ketama-style ring): 160 points per unit of weight, placed by the
// endpoint's identity, so adding or removing one endpoint moves only the keys that land
// on its points.
class RingHash final : public LoadBalancer {
 public:
  RingHash(const std::vector<uint32_t>& weights, const std::vector<std::string>& names) {
    for (std::size_t i = 0; i < weights.size(); ++i) {
      uint32_t points = 160 * weights[i];
      for (uint32_t p = 0; p < points; ++p) {
        ring_.push_back({hash64(names[i] + "#" + std::to_string(p)), static_cast<int>(i)});
      }
    }
    std::sort(ring_.begin(), ring_.end());
    n_ = static_cast<int>(weights.size());
  }
  int pick(const PickContext& ctx, FunctionRef<bool(int)> usable) override {
    if (ring_.empty()) return -1;
    auto it = std::lower_bound(ring_.begin(), ring_.end(), std::pair<uint64_t, int>{ctx.hash, -1});
    // Walk the ring clockwise to the first usable endpoint (then the excluded one).
    int fallback = -1;
    for (std::size_t k = 0; k < ring_.size(); ++k, ++it) {
      if (it == ring_.end()) it = ring_.begin();
      int i = it->second;
      if (!usable(i)) continue;
      if (i == ctx.exclude) {
        fallback = i;
        continue;
      }
      return i;
    }
    (void)n_;
    return fallback;
  }

 private:
  std::vector<std::pair<uint64_t, int>> ring_;
  int n_ = 0;
};

}  // namespace

std::unique_ptr<LoadBalancer> make_load_balancer(config::LbPolicy policy, const std::vector<uint32_t>& weights,
                                                 std::function<int64_t(int)> active,
                                                 const std::vector<std::string>& names) {
  switch (policy) {
    case config::LbPolicy::kRandom: return std::make_unique<Random>(weights);
    case config::LbPolicy::kLeastRequest: return std::make_unique<LeastRequest>(weights, std::move(active));
    case config::LbPolicy::kRingHash: return std::make_unique<RingHash>(weights, names);
    case config::LbPolicy::kRoundRobin: break;
  }
  return std::make_unique<RoundRobin>(weights);
}

}  // namespace sg::upstream
