// Deterministic tests of the local run queue protocol: FIFO order, overflow batch size and
// order, steal-half counts, index wrap-around. The concurrent stress test is in
// tests/stress/.
#include "exec/local_queue.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace sg::exec {
namespace {

struct FakeTask {
  FakeTask* next = nullptr;
  int id = 0;
};

struct VecOverflow {
  std::vector<int> ids;
  int batches = 0;
  void push_batch(FakeTask* first, FakeTask* last, std::size_t n) {
    ++batches;
    std::size_t seen = 0;
    for (FakeTask* t = first;; t = t->next) {
      ids.push_back(t->id);
      ++seen;
      if (t == last) break;
    }
    EXPECT_EQ(seen, n);
  }
};

std::vector<FakeTask> make_tasks(int n) {
  std::vector<FakeTask> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)].id = i;
  return v;
}

TEST(LocalQueue, PushPopIsFifo) {
  LocalQueue<FakeTask> q;
  VecOverflow of;
  auto tasks = make_tasks(10);
  for (auto& t : tasks) q.push_back_or_overflow(&t, of);
  EXPECT_EQ(q.len(), 10u);
  for (int i = 0; i < 10; ++i) {
    FakeTask* t = q.pop();
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->id, i);
  }
  EXPECT_EQ(q.pop(), nullptr);
  EXPECT_EQ(of.batches, 0);
}

TEST(LocalQueue, OverflowMovesOldestHalfPlusNewTaskInOneBatch) {
  LocalQueue<FakeTask> q;
  VecOverflow of;
  WorkerCounters stats;
  auto tasks = make_tasks(257);
  for (int i = 0; i < 256; ++i) {
    EXPECT_FALSE(q.push_back_or_overflow(&tasks[static_cast<std::size_t>(i)], of, &stats));
  }
  EXPECT_EQ(q.len(), 256u);
  EXPECT_EQ(q.remaining_slots(), 0u);
  EXPECT_TRUE(q.push_back_or_overflow(&tasks[256], of, &stats));
  EXPECT_EQ(stats.overflows, 1u);
  ASSERT_EQ(of.batches, 1);
  ASSERT_EQ(of.ids.size(), 129u);  // 128 oldest + the task being pushed
  for (int i = 0; i < 128; ++i) EXPECT_EQ(of.ids[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(of.ids.back(), 256);
  EXPECT_EQ(q.len(), 128u);
  for (int i = 128; i < 256; ++i) EXPECT_EQ(q.pop()->id, i);
  EXPECT_EQ(q.pop(), nullptr);
}

TEST(LocalQueue, StealTakesHalfRoundedUpAndReturnsOne) {
  LocalQueue<FakeTask> src, dst;
  VecOverflow of;
  WorkerCounters stats;
  auto tasks = make_tasks(11);
  for (auto& t : tasks) src.push_back_or_overflow(&t, of);
  FakeTask* got = src.stealer().steal_into(dst, &stats);
  ASSERT_NE(got, nullptr);
  // 11 - 11/2 = 6 stolen: tasks 0..5; the last one (5) is returned, 0..4 land in dst.
  EXPECT_EQ(got->id, 5);
  EXPECT_EQ(stats.steals, 6u);
  EXPECT_EQ(stats.steal_operations, 1u);
  EXPECT_EQ(dst.len(), 5u);
  EXPECT_EQ(src.len(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(dst.pop()->id, i);
  for (int i = 6; i < 11; ++i) EXPECT_EQ(src.pop()->id, i);
}

TEST(LocalQueue, StealSingleTaskReturnsItWithoutExposingAnything) {
  LocalQueue<FakeTask> src, dst;
  VecOverflow of;
  auto tasks = make_tasks(1);
  src.push_back_or_overflow(&tasks[0], of);
  EXPECT_EQ(src.stealer().steal_into(dst), &tasks[0]);
  EXPECT_EQ(dst.len(), 0u);
  EXPECT_EQ(src.stealer().steal_into(dst), nullptr);
}

TEST(LocalQueue, StealRefusedWhenThiefMoreThanHalfFull) {
  LocalQueue<FakeTask> src, dst;
  VecOverflow of;
  auto a = make_tasks(200);
  auto b = make_tasks(10);
  for (auto& t : a) dst.push_back_or_overflow(&t, of);
  for (auto& t : b) src.push_back_or_overflow(&t, of);
  EXPECT_EQ(src.stealer().steal_into(dst), nullptr);
  EXPECT_EQ(src.len(), 10u);
}

TEST(LocalQueue, IndicesWrapAround) {
  // Start 100 below 2^32 and cycle through several thousand operations, including
  // overflows and steals that straddle the wrap.
  const uint32_t start = UINT32_MAX - 100;
  LocalQueue<FakeTask, 8> q(start);
  LocalQueue<FakeTask, 8> thief(start - 3);
  VecOverflow of;
  auto tasks = make_tasks(4000);
  std::vector<int> seen;
  std::size_t next = 0;
  for (int round = 0; round < 400; ++round) {
    for (int i = 0; i < 9 && next < tasks.size(); ++i) q.push_back_or_overflow(&tasks[next++], of);
    if (FakeTask* t = q.stealer().steal_into(thief)) seen.push_back(t->id);
    while (FakeTask* t = thief.pop()) seen.push_back(t->id);
    while (FakeTask* t = q.pop()) seen.push_back(t->id);
  }
  seen.insert(seen.end(), of.ids.begin(), of.ids.end());
  EXPECT_EQ(seen.size(), next);
  std::vector<int> count(next, 0);
  for (int id : seen) ++count[static_cast<std::size_t>(id)];
  for (std::size_t i = 0; i < next; ++i) EXPECT_EQ(count[i], 1) << "task " << i;
  EXPECT_GT(of.batches, 0);
}

TEST(LocalQueue, SmallCapacityOverflowAndOrder) {
  LocalQueue<FakeTask, 4> q;
  VecOverflow of;
  auto tasks = make_tasks(5);
  for (auto& t : tasks) q.push_back_or_overflow(&t, of);
  ASSERT_EQ(of.ids, (std::vector<int>{0, 1, 4}));
  EXPECT_EQ(q.pop()->id, 2);
  EXPECT_EQ(q.pop()->id, 3);
  EXPECT_EQ(q.pop(), nullptr);
}

}  // namespace
}  // namespace sg::exec
