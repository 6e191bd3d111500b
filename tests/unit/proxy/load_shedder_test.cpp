// The CoDel-style detector behind adaptive shedding: enters only after a whole interval of
// samples at or above target, leaves at a low sample once refusals stopped for an interval.
#include "proxy/load_shedder.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace sg::proxy {
namespace {

using namespace std::chrono_literals;
using Clock = DelayDetector::Clock;

class DelayDetectorTest : public ::testing::Test {
 protected:
  void SetUp() override { d.configure(20ms, 100ms); }
  DelayDetector d;
  Clock::time_point t0 = Clock::now();
};

TEST_F(DelayDetectorTest, DisabledNeverSheds) {
  DelayDetector off;
  off.configure(0ms, 100ms);
  for (int i = 0; i < 100; ++i) off.observe(10s, t0 + i * 10ms);
  EXPECT_FALSE(off.shedding());
  EXPECT_EQ(off.times_entered(), 0u);
}

TEST_F(DelayDetectorTest, ShedsOnlyAfterAWholeIntervalAboveTarget) {
  d.observe(50ms, t0);
  d.observe(50ms, t0 + 50ms);
  d.observe(50ms, t0 + 99ms);
  EXPECT_FALSE(d.shedding()) << "a burst shorter than the interval must not shed";
  d.observe(50ms, t0 + 100ms);
  EXPECT_TRUE(d.shedding());
  EXPECT_EQ(d.times_entered(), 1u);
}

TEST_F(DelayDetectorTest, OneLowSampleRestartsTheInterval) {
  d.observe(50ms, t0);
  d.observe(50ms, t0 + 60ms);
  d.observe(5ms, t0 + 70ms);  // the queue drained once: not a standing queue
  d.observe(50ms, t0 + 80ms);
  d.observe(50ms, t0 + 170ms);
  EXPECT_FALSE(d.shedding()) << "the interval restarts at the first sample above target after a low one";
  d.observe(50ms, t0 + 180ms);
  EXPECT_TRUE(d.shedding());
}

TEST_F(DelayDetectorTest, TargetItselfCountsAsAbove) {
  d.observe(20ms, t0);
  d.observe(20ms, t0 + 100ms);
  EXPECT_TRUE(d.shedding());
}

TEST_F(DelayDetectorTest, LeavesAtALowSampleWhenNothingWasRefused) {
  d.observe(50ms, t0);
  d.observe(50ms, t0 + 100ms);
  ASSERT_TRUE(d.shedding());
  d.observe(50ms, t0 + 150ms);
  EXPECT_TRUE(d.shedding()) << "high samples keep it shedding";
  d.observe(0ms, t0 + 160ms);
  EXPECT_FALSE(d.shedding());
}

TEST_F(DelayDetectorTest, RecentRefusalsKeepItSheddingDespiteZeroWaits) {
  d.observe(50ms, t0);
  d.observe(50ms, t0 + 100ms);
  ASSERT_TRUE(d.shedding());
  // While shedding nobody queues: admitted requests report 0 wait, but refusals show that
  // demand still exceeds the limit.
  d.note_refused(t0 + 150ms);
  d.observe(0ms, t0 + 160ms);
  EXPECT_TRUE(d.shedding());
  d.note_refused(t0 + 240ms);
  d.observe(0ms, t0 + 300ms);
  EXPECT_TRUE(d.shedding());
  // No refusal for a whole interval: overload is over.
  d.observe(0ms, t0 + 340ms);
  EXPECT_FALSE(d.shedding());
  EXPECT_EQ(d.times_entered(), 1u);
}

TEST_F(DelayDetectorTest, ReentersAndCountsEpisodes) {
  for (int episode = 0; episode < 3; ++episode) {
    auto base = t0 + episode * 1s;
    d.observe(50ms, base);
    d.observe(50ms, base + 100ms);
    EXPECT_TRUE(d.shedding());
    d.observe(1ms, base + 500ms);
    EXPECT_FALSE(d.shedding());
  }
  EXPECT_EQ(d.times_entered(), 3u);
}

TEST_F(DelayDetectorTest, TurningItOffClearsTheState) {
  d.observe(50ms, t0);
  d.observe(50ms, t0 + 100ms);
  ASSERT_TRUE(d.shedding());
  d.configure(0ms, 100ms);
  EXPECT_FALSE(d.shedding());
}

TEST(LoadShedder, EitherSignalSheds) {
  LoadShedder s;
  s.configure(std::chrono::milliseconds(10), std::chrono::milliseconds(50));
  auto t = Clock::now();
  s.scheduling.observe(std::chrono::milliseconds(30), t);
  s.scheduling.observe(std::chrono::milliseconds(30), t + std::chrono::milliseconds(50));
  EXPECT_TRUE(s.shedding());
  EXPECT_FALSE(s.sojourn.shedding());
  // A zero queue wait says nothing about run-queue delay.
  s.sojourn.observe(std::chrono::milliseconds(0), t + std::chrono::milliseconds(60));
  EXPECT_TRUE(s.shedding());
}

// Samples from many threads at once (as from every worker): the state stays coherent
// and a sustained overload is always detected. Run under ThreadSanitizer.
TEST(LoadShedder, ConcurrentSamplesDetectSustainedOverload) {
  DelayDetector d;
  d.configure(std::chrono::milliseconds(10), std::chrono::milliseconds(20));
  auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&d, t0, k] {
      for (int i = 0; i < 20000; ++i) {
        d.observe(std::chrono::milliseconds(15 + k), t0 + std::chrono::microseconds(i * 10));
        if (i % 100 == 0) d.note_refused(t0 + std::chrono::microseconds(i * 10));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(d.shedding());
  EXPECT_GE(d.times_entered(), 1u);
}

}  // namespace
}  // namespace sg::proxy
