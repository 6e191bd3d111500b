// Load balancers and passive outlier detection, without sockets: smooth weighted round
// robin keeps exact proportions, least_request prefers idle endpoints, ring_hash maps a key
// to the same endpoint and moves only the keys of an endpoint that went away. (Outlier
// detection: outlier_test.cpp.)
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <string>
#include <vector>

#include "upstream/cluster.h"
#include "upstream/load_balancer.h"

namespace sg::upstream {
namespace {

std::unique_ptr<LoadBalancer> balancer(config::LbPolicy p, std::vector<uint32_t> weights,
                                       std::function<int64_t(int)> active = [](int) { return 0; }) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < weights.size(); ++i) names.push_back("10.0.0." + std::to_string(i + 1) + ":80");
  return make_load_balancer(p, weights, std::move(active), names);
}

const auto kAll = [](int) { return true; };

TEST(RoundRobin, KeepsTheWeightsExactlyAndSpreadsThem) {
  auto lb = balancer(config::LbPolicy::kRoundRobin, {1, 2, 1});
  std::array<int, 3> n{};
  int longest_run = 0, run = 0, last = -1;
  for (int i = 0; i < 400; ++i) {
    int k = lb->pick({}, kAll);
    ASSERT_GE(k, 0);
    ++n[static_cast<std::size_t>(k)];
    run = k == last ? run + 1 : 1;
    longest_run = std::max(longest_run, run);
    last = k;
  }
  EXPECT_EQ(n[0], 100);
  EXPECT_EQ(n[1], 200);
  EXPECT_EQ(n[2], 100);
  EXPECT_LE(longest_run, 2) << "smooth weighted round robin interleaves instead of bursting";
}

TEST(RoundRobin, SkipsUnusableAndExcludedEndpoints) {
  auto lb = balancer(config::LbPolicy::kRoundRobin, {1, 1, 1});
  for (int i = 0; i < 30; ++i) EXPECT_NE(lb->pick({}, [](int k) { return k != 1; }), 1);
  PickContext retry;
  retry.exclude = 0;
  for (int i = 0; i < 30; ++i) EXPECT_NE(lb->pick(retry, kAll), 0);
  // Exclusion gives way when nothing else is usable.
  EXPECT_EQ(lb->pick(retry, [](int k) { return k == 0; }), 0);
  EXPECT_EQ(lb->pick({}, [](int) { return false; }), -1);
}

TEST(LeastRequest, PrefersTheIdleEndpoint) {
  std::array<int64_t, 3> active = {10, 0, 10};
  auto lb = balancer(config::LbPolicy::kLeastRequest, {1, 1, 1}, [&](int i) { return active[static_cast<std::size_t>(i)]; });
  int idle = 0;
  for (int i = 0; i < 600; ++i) idle += lb->pick({}, kAll) == 1;
  // Power of two choices: the idle one wins every pair it is in (2 of 3 pairs).
  EXPECT_GT(idle, 350);
}

TEST(RingHash, AKeyStaysAndOnlyTheKeysOfALostEndpointMove) {
  auto lb = balancer(config::LbPolicy::kRingHash, {1, 1, 1, 1});
  std::map<uint64_t, int> before;
  for (int key = 0; key < 2000; ++key) {
    PickContext c;
    c.hash = hash64("client-" + std::to_string(key));
    before[c.hash] = lb->pick(c, kAll);
    EXPECT_EQ(lb->pick(c, kAll), before[c.hash]) << "the same key moved";
  }
  std::array<int, 4> share{};
  for (const auto& [h, k] : before) ++share[static_cast<std::size_t>(k)];
  for (int s : share) EXPECT_GT(s, 2000 / 4 / 3) << "an endpoint got almost no keys";
  int moved = 0;
  for (const auto& [h, k] : before) {
    PickContext c;
    c.hash = h;
    int now = lb->pick(c, [](int i) { return i != 2; });
    if (k != 2) {
      EXPECT_EQ(now, k) << "a key of a healthy endpoint moved";
    }
    moved += k == 2;
    EXPECT_NE(now, 2);
  }
  EXPECT_EQ(moved, share[2]);
}

TEST(Hash64, IsStable) {
  EXPECT_EQ(hash64("abc"), hash64(std::string("abc")));
  EXPECT_NE(hash64("abc"), hash64("abd"));
}

}  // namespace
}  // namespace sg::upstream
