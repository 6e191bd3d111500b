// Load balancers and passive outlier detection, without sockets: smooth weighted round
// robin keeps exact proportions, least_request prefers idle endpoints, ring_hash maps a key
// to the same endpoint and moves only the keys of an endpoint that went away; outlier
// detection ejects after consecutive failures, never more than max_ejection_percent, and
// a success resets the count.
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

std::shared_ptr<Cluster> cluster(uint32_t failures, uint32_t max_percent, std::size_t endpoints) {
  config::ClusterSection c;
  c.name = "app";
  for (std::size_t i = 0; i < endpoints; ++i) {
    config::EndpointSection e;
    e.address = {"127.0.0." + std::to_string(i + 1), 8080};
    c.endpoints.push_back(e);
  }
  c.outlier.consecutive_failures = failures;
  c.outlier.max_ejection_percent = max_percent;
  std::string error;
  auto built = Cluster::build(c, nullptr, 1, error);
  EXPECT_TRUE(built.ok()) << error;
  return *built;
}

TEST(OutlierDetection, EjectsAfterConsecutiveFailuresAndPicksAroundIt) {
  auto c = cluster(3, 50, 2);
  Endpoint& bad = *c->endpoints()[0];
  c->record_failure(bad);
  c->record_failure(bad);
  c->record_success(bad);  // the run is broken: counting starts again
  c->record_failure(bad);
  c->record_failure(bad);
  EXPECT_FALSE(bad.ejected(steady_now_ms()));
  c->record_failure(bad);
  EXPECT_TRUE(bad.ejected(steady_now_ms()));
  for (int i = 0; i < 20; ++i) EXPECT_EQ(c->pick({}), c->endpoints()[1].get());
}

TEST(OutlierDetection, NeverEjectsMoreThanMaxEjectionPercent) {
  auto c = cluster(1, 50, 2);
  c->record_failure(*c->endpoints()[0]);
  c->record_failure(*c->endpoints()[1]);
  const int64_t now = steady_now_ms();
  EXPECT_TRUE(c->endpoints()[0]->ejected(now));
  EXPECT_FALSE(c->endpoints()[1]->ejected(now)) << "half the cluster is the most that may be out";
  EXPECT_NE(c->pick({}), nullptr);
}

TEST(OutlierDetection, CanBeTurnedOff) {
  auto c = cluster(0, 100, 2);
  for (int i = 0; i < 100; ++i) c->record_failure(*c->endpoints()[0]);
  EXPECT_FALSE(c->endpoints()[0]->ejected(steady_now_ms()));
}

}  // namespace
}  // namespace sg::upstream
