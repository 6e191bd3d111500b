// The idle protocol (exec/idle.h), step by step on one thread: who is woken for new work,
// and who must re-check the queues before sleeping. The memory-order half of the argument
// (fences) is exercised by the executor's stress tests under ThreadSanitizer.
#include "exec/idle.h"

#include <gtest/gtest.h>

namespace sg::exec {
namespace {

// Puts all four workers to sleep, each parked as a non-searcher.
void park_all(Idle& idle) {
  for (std::size_t w = 0; w < 4; ++w) idle.transition_worker_to_parked(w, false);
}

TEST(Idle, NewWorkWakesOneSleeperCountedAsSearching) {
  Idle idle(4);
  park_all(idle);
  EXPECT_EQ(idle.num_unparked(), 0u);
  auto w = idle.worker_to_notify();
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(idle.num_unparked(), 1u);
  EXPECT_EQ(idle.num_searching(), 1u);
  EXPECT_FALSE(idle.is_parked(*w));
  // The woken worker searches: more work waits for it instead of waking a second one.
  EXPECT_FALSE(idle.worker_to_notify().has_value());
}

TEST(Idle, WorkPushedWhileSomeoneSearchesIsLeftToTheLastSearcherToPark) {
  Idle idle(4);
  park_all(idle);
  auto searcher = idle.worker_to_notify();
  ASSERT_TRUE(searcher.has_value());
  // A push now wakes nobody ...
  EXPECT_FALSE(idle.worker_to_notify().has_value());
  // ... so the searcher, finding nothing and parking, is told it was the last one: it
  // re-checks every queue before it sleeps (Worker::transition_to_parked).
  EXPECT_TRUE(idle.transition_worker_to_parked(*searcher, true));
  EXPECT_EQ(idle.num_searching(), 0u);
  // Asleep again, all of them: the next push wakes one.
  EXPECT_TRUE(idle.worker_to_notify().has_value());
}

TEST(Idle, OnlyTheLastOfSeveralSearchersReChecks) {
  Idle idle(4);  // all awake
  EXPECT_TRUE(idle.transition_worker_to_searching());
  EXPECT_TRUE(idle.transition_worker_to_searching());
  EXPECT_FALSE(idle.transition_worker_to_searching());  // at most half the workers search
  EXPECT_FALSE(idle.transition_worker_to_parked(0, true));
  EXPECT_TRUE(idle.transition_worker_to_parked(1, true));
  EXPECT_FALSE(idle.transition_worker_to_parked(2, false));  // a non-searcher never re-checks
}

TEST(Idle, TheLastSearcherToFindWorkIsToldToWakeAnother) {
  Idle idle(4);
  ASSERT_TRUE(idle.transition_worker_to_searching());
  ASSERT_TRUE(idle.transition_worker_to_searching());
  EXPECT_FALSE(idle.transition_worker_from_searching());
  EXPECT_TRUE(idle.transition_worker_from_searching());
}

TEST(Idle, NobodyIsWokenWhileEveryWorkerIsAwake) {
  Idle idle(4);
  EXPECT_FALSE(idle.worker_to_notify().has_value());
  idle.transition_worker_to_parked(3, false);
  auto w = idle.worker_to_notify();
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(*w, 3u);
}

TEST(Idle, AWorkerWokenByItsOwnIoLeavesTheSleepersList) {
  Idle idle(4);
  park_all(idle);
  EXPECT_TRUE(idle.unpark_worker_by_id(2));
  EXPECT_FALSE(idle.is_parked(2));
  EXPECT_EQ(idle.num_unparked(), 1u);
  EXPECT_EQ(idle.num_searching(), 0u);
  EXPECT_FALSE(idle.unpark_worker_by_id(2));  // already off the list
}

}  // namespace
}  // namespace sg::exec
