// Deterministic tests of the injection queue: FIFO order across push/pop/pop_n, batch
// splices, length accounting, and the order after a pop_n that leaves a remainder while
// new tasks arrive; how much a worker takes from it in one turn. The concurrent test is in
// tests/stress/inject_stress_test.cpp.
#include "exec/inject_queue.h"

#include <gtest/gtest.h>

#include <deque>
#include <vector>

#include "exec/worker.h"

namespace sg::exec {
namespace {

struct Tasks {
  std::deque<TaskHeader> items;
  TaskHeader* make() { return &items.emplace_back(nullptr, nullptr, 0u); }
  int id(const TaskHeader* t) const {
    for (std::size_t i = 0; i < items.size(); ++i)
      if (&items[i] == t) return static_cast<int>(i);
    return -1;
  }
};

TEST(InjectQueue, PushPopIsFifoAndCountsLength) {
  InjectQueue q;
  Tasks ts;
  EXPECT_TRUE(q.is_empty());
  EXPECT_EQ(q.pop(), nullptr);
  for (int i = 0; i < 5; ++i) q.push(ts.make());
  EXPECT_EQ(q.len(), 5u);
  for (int i = 0; i < 5; ++i) {
    TaskHeader* t = q.pop();
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(ts.id(t), i);
    EXPECT_EQ(t->next, nullptr);
    EXPECT_EQ(q.len(), static_cast<std::size_t>(4 - i));
  }
  EXPECT_EQ(q.pop(), nullptr);
}

TEST(InjectQueue, PushBatchSplicesAList) {
  InjectQueue q;
  Tasks ts;
  q.push(ts.make());
  TaskHeader* a = ts.make();
  TaskHeader* b = ts.make();
  TaskHeader* c = ts.make();
  a->next = b;
  b->next = c;
  c->next = a;  // garbage in the last link must not leak into the queue
  q.push_batch(a, c, 3);
  q.push(ts.make());
  EXPECT_EQ(q.len(), 5u);
  TaskHeader* out[8];
  ASSERT_EQ(q.pop_n(out, 8), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(ts.id(out[i]), i);
  EXPECT_TRUE(q.is_empty());
}

TEST(InjectQueue, PopNTakesAtMostMaxAndKeepsTheRestInOrder) {
  InjectQueue q;
  Tasks ts;
  for (int i = 0; i < 10; ++i) q.push(ts.make());
  TaskHeader* out[10];
  ASSERT_EQ(q.pop_n(out, 4), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(ts.id(out[i]), i);
    EXPECT_EQ(out[i]->next, nullptr);  // detached from the list
  }
  EXPECT_EQ(q.len(), 6u);
  q.push(ts.make());  // task 10 arrives after the remainder 4..9
  ASSERT_EQ(q.pop_n(out, 10), 7u);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(ts.id(out[i]), 4 + i);
  EXPECT_EQ(q.pop_n(out, 10), 0u);
  EXPECT_EQ(q.pop_n(out, 0), 0u);
}

TEST(InjectQueue, PopNOfExactlyEverythingLeavesAnEmptyUsableQueue) {
  InjectQueue q;
  Tasks ts;
  for (int i = 0; i < 3; ++i) q.push(ts.make());
  TaskHeader* out[3];
  ASSERT_EQ(q.pop_n(out, 3), 3u);
  EXPECT_TRUE(q.is_empty());
  q.push(ts.make());
  TaskHeader* t = q.pop();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(ts.id(t), 3);
  EXPECT_EQ(q.pop(), nullptr);
}

TEST(InjectQueue, CloseIsReportedOnceAndPushesStillWork) {
  InjectQueue q;
  Tasks ts;
  EXPECT_FALSE(q.is_closed());
  EXPECT_TRUE(q.close());
  EXPECT_FALSE(q.close());
  EXPECT_TRUE(q.is_closed());
  q.push(ts.make());
  EXPECT_NE(q.pop(), nullptr);
}

// A worker's turn at the injection queue (injected_batch_size: injected, workers, queued,
// free slots of a 256-slot local queue).
TEST(InjectedBatch, TakesItsShareUpToHalfAQueue) {
  EXPECT_EQ(injected_batch_size(1000, 4, 0, 256), 128u);  // share 251, capped at half
  EXPECT_EQ(injected_batch_size(100, 4, 0, 256), 26u);    // its share, one more than a quarter
  EXPECT_EQ(injected_batch_size(100, 4, 120, 136), 8u);   // tops the queue up to half
  EXPECT_EQ(injected_batch_size(1000, 2, 128, 128), 1u);  // at half or above: one per turn
  EXPECT_EQ(injected_batch_size(1000, 2, 255, 1), 1u);
  EXPECT_EQ(injected_batch_size(0, 2, 0, 256), 1u);       // never zero: the caller pops at most what is there
}

TEST(InjectedBatch, AStalledThiefsClaimedSlotsBoundTheBatch) {
  // A thief claimed 226 slots and has not copied them: len() says 10 queued, but only 20
  // slots are free. The half-fill rule alone would take 118 and overwrite the thief's
  // slots (the TSan stress run that found it hit push_back_batch's assertion). One task
  // is run at once, so 21 may be taken: 20 queued and the one returned.
  EXPECT_EQ(injected_batch_size(1000, 2, 10, 20), 21u);
  EXPECT_EQ(injected_batch_size(1000, 2, 0, 0), 1u);  // a full claim: only the one run at once
}

}  // namespace
}  // namespace sg::exec
