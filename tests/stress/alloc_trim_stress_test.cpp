// The task allocator's trim racing remote frees (run under ThreadSanitizer in the test
// command). One owner thread allocates blocks of three classes, stamps each, hands most
// of them to three other threads and trims its cache between rounds; the others check
// each stamp and free the block, onto the owner's remote stacks, while the owner trims.
// A slab released while one of its blocks was live, or a remote stack read without the
// acquire that pairs with the pushers' release, shows as a broken stamp or a race report.
// At the end every block is free, so one more trim gives back every slab carved here.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "exec/alloc.h"

namespace sg::exec {
namespace {

constexpr std::size_t kSizes[] = {200, 3000, 7000};
constexpr int kRounds = 300;
constexpr int kPerRound = 48;
constexpr int kFreers = 3;

struct Block {
  void* p;
  std::size_t bytes;
  uint64_t stamp;
};

struct Handoff {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Block> q;
  bool done = false;
};

void stamp(const Block& b) { std::memset(b.p, static_cast<int>(b.stamp & 0xff), b.bytes); }
bool intact(const Block& b) {
  const auto* c = static_cast<const unsigned char*>(b.p);
  return c[0] == (b.stamp & 0xff) && c[b.bytes / 2] == (b.stamp & 0xff) && c[b.bytes - 1] == (b.stamp & 0xff);
}

TEST(AllocTrimStress, TrimRacesRemoteFrees) {
  Handoff h;
  std::atomic<int> broken{0};
  std::atomic<int> freed_remotely{0};
  std::vector<std::thread> freers;
  for (int i = 0; i < kFreers; ++i) {
    freers.emplace_back([&] {
      for (;;) {
        Block b;
        {
          std::unique_lock lk(h.mu);
          h.cv.wait(lk, [&] { return !h.q.empty() || h.done; });
          if (h.q.empty()) return;
          b = h.q.front();
          h.q.pop_front();
        }
        if (!intact(b)) broken.fetch_add(1);
        task_free(b.p, b.bytes);
        freed_remotely.fetch_add(1);
      }
    });
  }
  std::size_t start_bytes = 0, released = 0, handed = 0;
  std::thread owner([&] {
    task_cache_trim();
    start_bytes = task_cache_slab_bytes();
    uint64_t next = 1;
    std::vector<Block> mine;
    for (int round = 0; round < kRounds; ++round) {
      for (int i = 0; i < kPerRound; ++i) {
        Block b{nullptr, kSizes[i % 3], next++};
        b.p = task_alloc(b.bytes);
        stamp(b);
        if (i % 4 == 0) {
          mine.push_back(b);
          continue;
        }
        std::lock_guard lk(h.mu);
        h.q.push_back(b);
        ++handed;
        h.cv.notify_one();
      }
      // Free the ones kept a round ago, after checking nothing overwrote them.
      for (const Block& b : mine) {
        if (!intact(b)) broken.fetch_add(1);
        task_free(b.p, b.bytes);
      }
      mine.clear();
      if (round % 3 == 0) released += task_cache_trim();
    }
    {
      std::lock_guard lk(h.mu);
      h.done = true;
    }
    h.cv.notify_all();
    for (auto& t : freers) t.join();
    released += task_cache_trim();
    EXPECT_EQ(task_cache_slab_bytes(), start_bytes) << "every block is free: every slab carved here is released";
  });
  owner.join();
  EXPECT_EQ(broken.load(), 0);
  EXPECT_EQ(static_cast<std::size_t>(freed_remotely.load()), handed);
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_GT(released, 0u);
#endif
}

}  // namespace
}  // namespace sg::exec
