// The timing wheel against a brute-force model: every entry fires exactly once, never
// before its expiry and at the first advance that reaches it, across all six levels,
// with removals, batches cut short, and expiries beyond the wheel's range.
#include "exec/timer_wheel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

namespace sg::exec {
namespace {

struct Entry {
  TimerNode node;
  uint64_t fired_at = 0;
  int fires = 0;
};

std::vector<TimerNode*> advance_all(TimerWheel& w, uint64_t now, std::size_t batch = SIZE_MAX) {
  std::vector<TimerNode*> fired;
  while (w.advance(now, batch, [&](TimerNode* n) { fired.push_back(n); }) == batch) {
  }
  return fired;
}

TEST(TimerWheel, DueEntryIsRefused) {
  TimerWheel w;
  TimerNode n;
  n.when = 0;
  EXPECT_FALSE(w.insert(&n));
  EXPECT_FALSE(n.linked);
  EXPECT_TRUE(w.empty());
}

TEST(TimerWheel, FiresAtItsMillisecondNotBefore) {
  TimerWheel w;
  TimerNode n;
  n.when = 5;
  ASSERT_TRUE(w.insert(&n));
  EXPECT_EQ(w.next_expiration(), 5u);
  EXPECT_TRUE(advance_all(w, 4).empty());
  EXPECT_EQ(w.elapsed(), 4u);
  EXPECT_EQ(advance_all(w, 5), std::vector<TimerNode*>{&n});
  EXPECT_FALSE(n.linked);
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(w.next_expiration(), std::nullopt);
}

TEST(TimerWheel, EachLevelCascadesDownToItsMillisecond) {
  // One entry per level: 10 ms, 1 s, 5 min, 3 h, 2 days, 300 days.
  const uint64_t whens[] = {10, 1'000, 300'000, 10'800'000, 172'800'000, 25'920'000'000};
  for (uint64_t when : whens) {
    TimerWheel w;
    TimerNode n;
    n.when = when;
    ASSERT_TRUE(w.insert(&n));
    ASSERT_TRUE(advance_all(w, when - 1).empty()) << when;
    // On the way, the next expiration never lies beyond the entry's own.
    ASSERT_LE(*w.next_expiration(), when);
    ASSERT_EQ(advance_all(w, when).size(), 1u) << when;
  }
}

TEST(TimerWheel, RemovedEntryNeverFiresAndEmptiesItsSlot) {
  TimerWheel w;
  TimerNode a, b;
  a.when = 70;
  b.when = 70;
  ASSERT_TRUE(w.insert(&a));
  ASSERT_TRUE(w.insert(&b));
  w.remove(&a);
  w.remove(&a);  // twice is harmless
  EXPECT_EQ(advance_all(w, 100), std::vector<TimerNode*>{&b});
  TimerNode c;
  c.when = 200;
  ASSERT_TRUE(w.insert(&c));
  w.remove(&c);
  EXPECT_EQ(w.next_expiration(), std::nullopt);
}

TEST(TimerWheel, BeyondTheRangeStillFiresOnTime) {
  TimerWheel w;
  TimerNode n;
  n.when = TimerWheel::kMaxDuration + 12'345;
  ASSERT_TRUE(w.insert(&n));
  // Jump in large steps, as a long-idle runtime would.
  for (uint64_t t = 0; t < n.when; t += TimerWheel::kMaxDuration / 3) {
    ASSERT_TRUE(advance_all(w, std::min(t, n.when - 1)).empty()) << t;
  }
  ASSERT_TRUE(advance_all(w, n.when - 1).empty());
  EXPECT_EQ(advance_all(w, n.when).size(), 1u);
}

TEST(TimerWheel, BatchCutShortContinuesWhereItStopped) {
  TimerWheel w;
  std::vector<TimerNode> nodes(10);
  for (auto& n : nodes) {
    n.when = 3;
    ASSERT_TRUE(w.insert(&n));
  }
  std::vector<TimerNode*> fired;
  EXPECT_EQ(w.advance(3, 4, [&](TimerNode* n) { fired.push_back(n); }), 4u);
  EXPECT_EQ(w.size(), 6u);
  // A due entry left over can still be removed (its owner gave up meanwhile).
  TimerNode* left = nullptr;
  for (auto& n : nodes) {
    if (n.linked) left = &n;
  }
  ASSERT_NE(left, nullptr);
  w.remove(left);
  EXPECT_EQ(w.next_expiration(), 3u);
  EXPECT_EQ(w.advance(3, 4, [&](TimerNode* n) { fired.push_back(n); }), 4u);
  EXPECT_EQ(w.advance(3, 4, [&](TimerNode* n) { fired.push_back(n); }), 1u);
  EXPECT_EQ(fired.size(), 9u);
  EXPECT_TRUE(w.empty());
}

TEST(TimerWheel, RandomScheduleMatchesModel) {
  std::mt19937_64 rng(20261201);
  TimerWheel w;
  std::vector<Entry> entries(4000);
  std::map<TimerNode*, Entry*> by_node;
  for (auto& e : entries) {
    by_node[&e.node] = &e;
  }
  uint64_t now = 0;
  std::size_t next = 0;
  std::uniform_int_distribution<int> kind(0, 9);
  while (next < entries.size() || !w.empty()) {
    int k = kind(rng);
    if (k < 5 && next < entries.size()) {
      // Spread over the levels: 1 ms to ~50 days.
      uint64_t span = uint64_t{1} << std::uniform_int_distribution<int>(0, 32)(rng);
      Entry& e = entries[next++];
      e.node.when = now + 1 + std::uniform_int_distribution<uint64_t>(0, span)(rng);
      ASSERT_TRUE(w.insert(&e.node));
    } else if (k < 6 && next > 0) {
      Entry& e = entries[std::uniform_int_distribution<std::size_t>(0, next - 1)(rng)];
      if (e.node.linked) {
        w.remove(&e.node);
        e.fires = -1;  // cancelled
      }
    } else {
      // Advance by a step that is sometimes tiny, sometimes days.
      uint64_t step = uint64_t{1} << std::uniform_int_distribution<int>(0, 34)(rng);
      step = std::uniform_int_distribution<uint64_t>(0, step)(rng);
      uint64_t target = now + step;
      for (TimerNode* n : advance_all(w, target, 7)) {
        Entry* e = by_node.at(n);
        ASSERT_GE(e->fires, 0) << "a cancelled entry fired";
        ++e->fires;
        e->fired_at = target;
        ASSERT_LE(n->when, target) << "fired early";
        ASSERT_GT(n->when, now) << "fired late: due before the previous advance";
      }
      now = target;
      ASSERT_EQ(w.elapsed(), now);
      if (auto nx = w.next_expiration()) {
        ASSERT_GT(*nx, now);
      }
    }
  }
  for (const auto& e : entries) ASSERT_TRUE(e.fires == 1 || e.fires == -1);
}

}  // namespace
}  // namespace sg::exec
