// common/thread_cache.h under concurrency (run by the TSan build, suite "concurrency"):
// threads take and give back blocks through their own stacks and the shared depot; no
// block is ever held twice at once, and every block ends up held, kept or released once.
#include "common/thread_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <random>
#include <thread>
#include <vector>

namespace {

struct Block {
  std::atomic<int> holders{0};
  std::atomic<int> released{0};
};

void release_block(void* p) noexcept { static_cast<Block*>(p)->released.fetch_add(1, std::memory_order_relaxed); }

using Cache = sg::PerThreadCache<struct StressTag, 8, release_block>;

void hold(Block* b) { ASSERT_EQ(b->holders.fetch_add(1, std::memory_order_relaxed), 0) << "a block held twice"; }
void let_go(Block* b) { b->holders.fetch_sub(1, std::memory_order_relaxed); }

TEST(PerThreadCache, BlocksMoveBetweenThreadsThroughTheDepotExactlyOnce) {
  constexpr int kThreads = 4;
  constexpr int kBlocksEach = 40;
  std::vector<Block> blocks(kThreads * kBlocksEach);
  std::atomic<std::size_t> taken_from_cache{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<Block*> mine;
      for (int i = 0; i < kBlocksEach; ++i) mine.push_back(&blocks[static_cast<std::size_t>(t * kBlocksEach + i)]);
      for (Block* b : mine) hold(b);
      for (int round = 0; round < 20000; ++round) {
        if (!mine.empty() && (rng() % 2 == 0 || mine.size() > 60)) {
          Block* b = mine.back();
          mine.pop_back();
          let_go(b);
          if (!Cache::keep(b)) release_block(b);  // released: out of play for good
        } else if (void* p = Cache::take()) {
          auto* b = static_cast<Block*>(p);
          hold(b);
          mine.push_back(b);
          taken_from_cache.fetch_add(1, std::memory_order_relaxed);
        }
      }
      for (Block* b : mine) {
        let_go(b);
        release_block(b);
      }
    });  // the thread's exit releases its own stack
  }
  for (auto& th : threads) th.join();
  Cache::clear();  // the depot (this thread's stack is empty)
  for (const Block& b : blocks) {
    EXPECT_EQ(b.holders.load(), 0);
    EXPECT_EQ(b.released.load(), 1);  // released once: never lost, never twice
  }
  EXPECT_GT(taken_from_cache.load(), 0u);
}

TEST(PerThreadCache, AnEmptyStackRefillsFromAnotherThreadsOverflow) {
  std::vector<Block> blocks(9);
  std::thread giver([&] {
    for (Block& b : blocks) ASSERT_TRUE(Cache::keep(&b));  // the ninth spills four to the depot
    EXPECT_EQ(Cache::size(), 5u);
  });
  giver.join();  // released its five
  EXPECT_EQ(Cache::depot_size(), 4u);
  int served = 0;
  while (Cache::take() != nullptr) ++served;
  EXPECT_EQ(served, 4);
  EXPECT_EQ(Cache::depot_size(), 0u);
}

}  // namespace
