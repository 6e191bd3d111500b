// Task diagnostics under concurrency, meant for ThreadSanitizer: tasks are created on
// workers and on outside threads, wake each other across workers, rename themselves, get
// cancelled and are freed on other workers than the one that created them, while readers
// copy the registry and the slowest-polls logs. Every record a reader sees is whole (a
// name it knows, an id seen once per snapshot), and once the tasks are gone so are their
// records.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "exec/notify.h"
#include "exec/runtime.h"
#include "../support/eventually.h"

namespace sg::exec {
namespace {

using namespace std::chrono_literals;
using sg::testing::eventually;

bool known_name(const std::string& n) {
  return n.empty() || n == "pinger" || n == "ponger" || n == "renamed pinger" || n == "child" || n == "remote";
}

Task<void> ping(Notify& mine, Notify& theirs, int rounds, std::atomic<int>& done) {
  for (int i = 0; i < rounds; ++i) {
    theirs.notify_one();
    co_await mine.notified();
    if (i == rounds / 2) label_current_task({TaskKind::kRequest, "renamed pinger"});
  }
  theirs.notify_one();
  done.fetch_add(1);
}

TEST(DiagnosticsStress, RecordsStayWholeWhileTasksComeAndGo) {
  RuntimeConfig cfg;
  cfg.worker_threads = 4;
  cfg.task_diagnostics = true;
  Runtime rt(cfg);
  Scheduler* s = rt.handle().scheduler();
  constexpr int kPairs = 200, kRounds = 300, kRemote = 2000;
  std::atomic<int> done{0};
  std::atomic<int> remote_done{0};
  std::atomic<bool> stop{false};
  std::atomic<int> snapshots{0};
  std::atomic<int> bad{0};

  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        std::set<uint64_t> ids;
        for (const auto& t : s->tasks().snapshot(now_ns())) {
          if (!known_name(t.name) || !ids.insert(t.id).second) bad.fetch_add(1);
          if (t.busy_ns + t.scheduled_ns + t.idle_ns < t.age_ns) bad.fetch_add(1);
        }
        for (const auto& p : s->slow_polls()) {
          if (!known_name(p.name)) bad.fetch_add(1);
        }
        snapshots.fetch_add(1);
      }
    });
  }

  std::vector<std::unique_ptr<Notify>> notes;
  for (int i = 0; i < 2 * kPairs; ++i) notes.push_back(std::make_unique<Notify>());
  for (int i = 0; i < kPairs; ++i) {
    Notify& a = *notes[2 * i];
    Notify& b = *notes[2 * i + 1];
    rt.spawn_detached(ping(a, b, kRounds, done), {TaskKind::kConnection, "pinger"});
    rt.spawn_detached(
        [&a, &b, &done]() -> Task<void> {
          // Spawns a child on a worker (a worker's shard) that is cancelled mid-wait.
          Notify never;
          auto child = spawn([&never]() -> Task<void> { co_await never.notified(); },
                             {TaskKind::kRequest, "child"});
          co_await ping(b, a, kRounds, done);
          child.cancel();
          co_await child;
        },
        {TaskKind::kConnection, "ponger"});
  }
  std::thread remote([&] {
    for (int i = 0; i < kRemote; ++i) {
      rt.spawn_detached([&remote_done] { remote_done.fetch_add(1); }, {TaskKind::kProbe, "remote"});
    }
  });
  remote.join();
  EXPECT_TRUE(eventually([&] { return done.load() == 2 * kPairs && remote_done.load() == kRemote; }, 60s));
  EXPECT_TRUE(eventually([&] { return s->tasks().snapshot(now_ns()).empty(); }, 60s));
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(snapshots.load(), 0);
}

}  // namespace
}  // namespace sg::exec
