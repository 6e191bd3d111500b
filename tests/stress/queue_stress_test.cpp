// Concurrent stress of the local queue protocol: one owner pushes (overflowing into a
// mutex-protected vector) and pops, several thieves steal into their own queues and drain
// them. Every task must be seen exactly once. Capacity 4 makes full/overflow/steal races
// frequent; 256 is the production size. Meant to run under ThreadSanitizer.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "exec/local_queue.h"

namespace sg::exec {
namespace {

struct FakeTask {
  FakeTask* next = nullptr;
  int id = 0;
};

struct LockedOverflow {
  std::mutex mu;
  std::vector<FakeTask*> tasks;
  void push_batch(FakeTask* first, FakeTask* last, std::size_t) {
    std::lock_guard lk(mu);
    for (FakeTask* t = first;; t = t->next) {
      tasks.push_back(t);
      if (t == last) break;
    }
  }
};

template <uint32_t Cap>
void run_stress(int num_tasks, int thieves) {
  std::vector<FakeTask> tasks(static_cast<std::size_t>(num_tasks));
  for (int i = 0; i < num_tasks; ++i) tasks[static_cast<std::size_t>(i)].id = i;
  auto seen = std::make_unique<std::atomic<int>[]>(static_cast<std::size_t>(num_tasks));
  LockedOverflow overflow;
  LocalQueue<FakeTask, Cap> owner;
  Stealer<FakeTask, Cap> stealer = owner.stealer();
  std::atomic<bool> done{false};
  std::atomic<bool> thieves_hold{false};
  std::atomic<int> steals{0};
  std::atomic<bool> overflowed{false};
  struct CountingOverflow {
    LockedOverflow& inner;
    std::atomic<bool>& flag;
    void push_batch(FakeTask* first, FakeTask* last, std::size_t n) {
      inner.push_batch(first, last, n);
      flag.store(true, std::memory_order_relaxed);
    }
  } counting{overflow, overflowed};

  auto see = [&](FakeTask* t) { seen[static_cast<std::size_t>(t->id)].fetch_add(1, std::memory_order_relaxed); };

  std::vector<std::thread> ths;
  for (int k = 0; k < thieves; ++k) {
    ths.emplace_back([&] {
      LocalQueue<FakeTask, Cap> mine;
      while (!done.load(std::memory_order_acquire) || !stealer.is_empty()) {
        if (thieves_hold.load(std::memory_order_acquire)) {
          std::this_thread::yield();
          continue;
        }
        if (FakeTask* t = stealer.steal_into(mine)) {
          steals.fetch_add(1, std::memory_order_relaxed);
          see(t);
          while (FakeTask* u = mine.pop()) see(u);
        } else {
          std::this_thread::yield();
        }
      }
    });
  }
  for (int i = 0; i < num_tasks; ++i) {
    owner.push_back_or_overflow(&tasks[static_cast<std::size_t>(i)], counting);
    // In the second half the owner stops popping until the queue has overflowed at least
    // once, so overflow races with the thieves' steals. Two quick thieves can still keep
    // it from filling; by three quarters they hold off until it has (within 256 pushes).
    const bool need_overflow = i >= num_tasks / 2 && !overflowed.load(std::memory_order_relaxed);
    thieves_hold.store(need_overflow && i >= num_tasks * 3 / 4, std::memory_order_release);
    if (i % 3 == 0 && !need_overflow) {
      if (FakeTask* t = owner.pop()) see(t);
    }
    // Give thieves a chance now and then so steals interleave with pushes and pops.
    if (i % 4096 == 0) std::this_thread::yield();
    // Halfway, make sure a steal has happened at all (on a loaded 2-core machine the
    // thieves may not have been scheduled yet): hold the queue non-empty until one has.
    if (i == num_tasks / 2) {
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (steals.load() == 0 && !stealer.is_empty() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();
      }
    }
  }
  thieves_hold.store(false, std::memory_order_release);
  while (FakeTask* t = owner.pop()) see(t);
  done.store(true, std::memory_order_release);
  for (auto& th : ths) th.join();
  while (FakeTask* t = owner.pop()) see(t);
  for (FakeTask* t : overflow.tasks) see(t);

  for (int i = 0; i < num_tasks; ++i) {
    ASSERT_EQ(seen[static_cast<std::size_t>(i)].load(), 1) << "task " << i;
  }
  // The races under test happened at all.
  EXPECT_GT(steals.load(), 0);
  EXPECT_GT(overflow.tasks.size(), 0u);
}

TEST(QueueStress, Capacity4ThreeThieves) { run_stress<4>(200'000, 3); }
TEST(QueueStress, Capacity256TwoThieves) { run_stress<256>(300'000, 2); }
TEST(QueueStress, Capacity256OneThief) { run_stress<256>(300'000, 1); }

}  // namespace
}  // namespace sg::exec
