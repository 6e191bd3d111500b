// Concurrent stress of the injection queue: producers push single tasks and batches while
// consumers take them with pop() and pop_n() (whose remainder is spliced back outside the
// first critical section). Every task must be taken exactly once and the length must
// return to zero. (Order is not checked: a consumer may take tasks pushed while another
// consumer's pop_n remainder was detached before that remainder; see inject_queue.h.)
// Meant to run under ThreadSanitizer.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "exec/inject_queue.h"

namespace sg::exec {
namespace {

struct Item : TaskHeader {
  Item() : TaskHeader(nullptr, nullptr, 0u) {}
  int producer = 0;
  int seq = 0;
};

TEST(InjectQueueStress, EveryTaskTakenExactlyOnce) {
  constexpr int kProducers = 3, kConsumers = 3, kPerProducer = 50000;
  InjectQueue q;
  std::vector<std::unique_ptr<Item[]>> items;
  for (int p = 0; p < kProducers; ++p) items.push_back(std::make_unique<Item[]>(kPerProducer));
  auto seen = std::make_unique<std::atomic<int>[]>(kProducers * kPerProducer);
  std::atomic<int> taken{0};

  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      Item* mine = items[static_cast<std::size_t>(p)].get();
      for (int i = 0; i < kPerProducer;) {
        int batch = (i % 7 == 0) ? std::min(5, kPerProducer - i) : 1;
        for (int k = 0; k < batch; ++k) {
          Item& it = mine[static_cast<std::size_t>(i + k)];
          it.producer = p;
          it.seq = i + k;
          it.next = k + 1 < batch ? &mine[static_cast<std::size_t>(i + k + 1)] : nullptr;
        }
        q.push_batch(&mine[static_cast<std::size_t>(i)], &mine[static_cast<std::size_t>(i + batch - 1)],
                     static_cast<std::size_t>(batch));
        i += batch;
      }
    });
  }
  for (int c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&, c] {
      TaskHeader* out[64];
      auto take = [&](TaskHeader* h) {
        auto* it = static_cast<Item*>(h);
        seen[it->producer * kPerProducer + it->seq].fetch_add(1, std::memory_order_relaxed);
        taken.fetch_add(1, std::memory_order_relaxed);
      };
      for (unsigned round = 0; taken.load(std::memory_order_relaxed) < kProducers * kPerProducer; ++round) {
        if ((round + static_cast<unsigned>(c)) % 3 == 0) {
          if (TaskHeader* t = q.pop()) take(t);
        } else {
          std::size_t n = q.pop_n(out, 1 + round % 64);
          for (std::size_t i = 0; i < n; ++i) take(out[i]);
        }
      }
    });
  }
  for (auto& t : threads) t.join();

  EXPECT_EQ(q.len(), 0u);
  EXPECT_EQ(q.pop(), nullptr);
  for (int i = 0; i < kProducers * kPerProducer; ++i) ASSERT_EQ(seen[i].load(), 1) << "task " << i;
}

}  // namespace
}  // namespace sg::exec
