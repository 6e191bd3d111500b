// Passive outlier detection, without sockets: an endpoint is ejected after consecutive
// failed attempts (a success resets the count), never more than max_ejection_percent of
// the cluster at once; each further recent ejection lasts one more base_ejection_time
// (capped by max_ejection_time) and time in service since the last one takes them off
// again; ejections and the ones refused are counted; responses are counted per endpoint
// by status class.
#include <gtest/gtest.h>

#include <string>

#include "upstream/cluster.h"

namespace sg::upstream {
namespace {

using namespace std::chrono_literals;

struct Outlier {
  uint32_t failures = 3;
  uint32_t max_percent = 50;
  config::Duration base = 10s;
  config::Duration max = 35s;
};

std::shared_ptr<Cluster> cluster(std::size_t endpoints, Outlier o = {}) {
  config::ClusterSection c;
  c.name = "app";
  for (std::size_t i = 0; i < endpoints; ++i) {
    config::EndpointSection e;
    e.address = {"127.0.0." + std::to_string(i + 1), 8080};
    c.endpoints.push_back(e);
  }
  c.outlier.consecutive_failures = o.failures;
  c.outlier.max_ejection_percent = o.max_percent;
  c.outlier.base_ejection_time = o.base;
  c.outlier.max_ejection_time = o.max;
  std::string error;
  auto built = Cluster::build(c, nullptr, 1, error);
  EXPECT_TRUE(built.ok()) << error;
  return *built;
}

void fail(Cluster& c, Endpoint& e, int times) {
  for (int i = 0; i < times; ++i) c.record_failure(e);
}

// How long the endpoint's current ejection lasts from now, in ms (0: not ejected).
int64_t ejection_left(const Endpoint& e) {
  return std::max<int64_t>(e.ejected_until_ms.load() - steady_now_ms(), 0);
}

// Ends the current ejection as if it ran out `ago` before now.
void end_ejection(Endpoint& e, config::Duration ago = 0ms) {
  e.ejected_until_ms.store(steady_now_ms() - ago.count());
}

TEST(OutlierDetection, EjectsAfterConsecutiveFailuresAndPicksAroundIt) {
  auto c = cluster(2);
  Endpoint& bad = *c->endpoints()[0];
  fail(*c, bad, 2);
  c->record_success(bad);  // the run is broken: counting starts again
  fail(*c, bad, 2);
  EXPECT_FALSE(bad.ejected(steady_now_ms()));
  c->record_failure(bad);
  EXPECT_TRUE(bad.ejected(steady_now_ms()));
  EXPECT_EQ(bad.stats().ejections.load(), 1u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(c->pick({}), c->endpoints()[1].get());
}

TEST(OutlierDetection, NeverEjectsMoreThanMaxEjectionPercent) {
  auto c = cluster(2, {.failures = 1});
  c->record_failure(*c->endpoints()[0]);
  c->record_failure(*c->endpoints()[1]);
  c->record_failure(*c->endpoints()[1]);
  const int64_t now = steady_now_ms();
  EXPECT_TRUE(c->endpoints()[0]->ejected(now));
  EXPECT_FALSE(c->endpoints()[1]->ejected(now)) << "half the cluster is the most that may be out";
  EXPECT_EQ(c->stats().ejections_refused.load(), 2u);
  EXPECT_EQ(c->endpoints()[1]->stats().ejections.load(), 0u);
  EXPECT_NE(c->pick({}), nullptr);
}

TEST(OutlierDetection, EachRecentEjectionLastsOneBaseTimeLongerUpToTheMax) {
  auto c = cluster(2, {.max_percent = 100});
  Endpoint& e = *c->endpoints()[0];
  for (int64_t expected_s : {10, 20, 30, 35, 35}) {
    fail(*c, e, 3);
    EXPECT_NEAR(static_cast<double>(ejection_left(e)), static_cast<double>(expected_s * 1000), 100.0);
    end_ejection(e);  // it comes back and fails again at once
  }
  EXPECT_EQ(e.stats().ejections.load(), 5u);
}

TEST(OutlierDetection, TimeInServiceTakesTheLongerEjectionsBack) {
  auto c = cluster(2, {.max_percent = 100});
  Endpoint& e = *c->endpoints()[0];
  for (int i = 0; i < 3; ++i) {  // three ejections in a row: the next would last 40 s (35 s)
    fail(*c, e, 3);
    end_ejection(e);
  }
  end_ejection(e, 25s);  // two whole base times served since: two are forgiven
  fail(*c, e, 3);
  EXPECT_NEAR(static_cast<double>(ejection_left(e)), 20'000.0, 100.0);
  end_ejection(e, 1h);  // a long time in service: back to the base time
  fail(*c, e, 3);
  EXPECT_NEAR(static_cast<double>(ejection_left(e)), 10'000.0, 100.0);
}

TEST(OutlierDetection, CanBeTurnedOff) {
  auto c = cluster(2, {.failures = 0, .max_percent = 100});
  fail(*c, *c->endpoints()[0], 100);
  EXPECT_FALSE(c->endpoints()[0]->ejected(steady_now_ms()));
  EXPECT_EQ(c->endpoints()[0]->stats().ejections.load(), 0u);
}

TEST(EndpointStats, CountsFinalResponsesByStatusClass) {
  EndpointStats s;
  for (int status : {101, 200, 204, 302, 404, 503, 504, 99, 600}) s.count_response(status);
  EXPECT_EQ(s.responses[0].load(), 1u);
  EXPECT_EQ(s.responses[1].load(), 2u);
  EXPECT_EQ(s.responses[2].load(), 1u);
  EXPECT_EQ(s.responses[3].load(), 1u);
  EXPECT_EQ(s.responses[4].load(), 2u) << "statuses outside 100-599 count nowhere";
}

}  // namespace
}  // namespace sg::upstream
