// Task diagnostics: the live-task registry (kinds, names, polls, busy and queued time,
// wakes by source), the poll-time histogram, long polls and the slowest-polls log.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "exec/notify.h"
#include "exec/runtime.h"
#include "exec/timers.h"
#include "../../support/eventually.h"
#include "../../support/spin.h"
#include "../../support/workers.h"

namespace sg::exec {
namespace {

using namespace std::chrono_literals;
using sg::testing::eventually;

// The library's default has no task records; these tests are about them.
RuntimeConfig workers_with_diagnostics(std::size_t n) {
  RuntimeConfig c = sg::testing::workers(n);
  c.task_diagnostics = true;
  return c;
}

std::optional<TaskInfo> find_task(Runtime& rt, std::string_view name) {
  for (auto& t : rt.handle().scheduler()->tasks().snapshot(now_ns())) {
    if (t.name == name) return t;
  }
  return std::nullopt;
}

using sg::testing::spin_for;

TEST(TaskDiagnostics, ALabelledTaskIsListedWhileItLivesAndGoneAfter) {
  Runtime rt(workers_with_diagnostics(2));
  Notify go;
  auto h = rt.spawn([&]() -> Task<void> { co_await go.notified(); }, {TaskKind::kConnection, "client 1"});
  ASSERT_TRUE(eventually([&] { return find_task(rt, "client 1").has_value(); }));
  auto t = *find_task(rt, "client 1");
  EXPECT_EQ(t.kind, TaskKind::kConnection);
  EXPECT_NE(t.id, 0u);
  ASSERT_TRUE(eventually([&] { return find_task(rt, "client 1")->state == TaskInfo::State::kIdle; }));
  go.notify_one();
  h.wait();
  h = {};
  EXPECT_TRUE(eventually([&] { return !find_task(rt, "client 1").has_value(); }));
}

TEST(TaskDiagnostics, LiveTasksAreCountedByKindAndUncountedWhenGone) {
  Runtime rt(workers_with_diagnostics(2));
  TaskRegistry& tasks = rt.handle().scheduler()->tasks();
  const auto connections = [&] { return tasks.count_by_kind()[static_cast<std::size_t>(TaskKind::kConnection)]; };
  const auto admin = [&] { return tasks.count_by_kind()[static_cast<std::size_t>(TaskKind::kAdmin)]; };
  const uint64_t connections_before = connections(), admin_before = admin();
  Notify go;
  std::vector<JoinHandle<void>> hs;
  for (int i = 0; i < 3; ++i) hs.push_back(rt.spawn([&]() -> Task<void> { co_await go.notified(); }, {TaskKind::kConnection, "c"}));
  hs.push_back(rt.spawn([&]() -> Task<void> { co_await go.notified(); }, {TaskKind::kAdmin, "a"}));
  ASSERT_TRUE(eventually([&] { return go.waiter_count() == 4; }));
  EXPECT_EQ(connections(), connections_before + 3);
  EXPECT_EQ(admin(), admin_before + 1);
  for (std::size_t i = 0; i < hs.size(); ++i) go.notify_one();
  for (auto& h : hs) h.wait();
  hs.clear();
  EXPECT_TRUE(eventually([&] { return connections() == connections_before && admin() == admin_before; }));
}

TEST(TaskDiagnostics, CountsPollsAndWakesBySource) {
  Runtime rt(workers_with_diagnostics(1));
  Notify go;
  std::atomic<bool> slept{false};
  auto h = rt.spawn(
      [&]() -> Task<void> {
        for (int i = 0; i < 10; ++i) co_await yield_now();  // 10 more polls, no wakes
        co_await sleep_for(2ms);                            // one timer wake
        slept = true;
        co_await go.notified();                             // one remote wake (the test thread)
      },
      {TaskKind::kRequest, "counted"});
  ASSERT_TRUE(eventually([&] { return slept.load() && go.waiter_count() == 1; }));
  auto before = *find_task(rt, "counted");
  EXPECT_EQ(before.polls, 12u);  // first poll, 10 after yields, 1 after the timer
  EXPECT_EQ(before.wakes[static_cast<int>(WakeSource::kTimer)], 1u);
  EXPECT_EQ(before.wakes[static_cast<int>(WakeSource::kRemote)], 0u);
  EXPECT_EQ(before.last_worker, 0u);
  go.notify_one();
  // Keep the handle so the record stays until we read it: the task completes, then is freed.
  h.wait();
}

TEST(TaskDiagnostics, RemoteAndLocalWakesAreTellApart) {
  Runtime rt(workers_with_diagnostics(2));
  Notify remote, local;
  std::atomic<bool> waiting{false};
  auto waiter = rt.spawn(
      [&]() -> Task<void> {
        co_await remote.notified();
        waiting = true;
        co_await local.notified();
        co_await yield_now();  // parks on nothing: keeps the task alive a moment
        co_await sleep_for(200ms);
      },
      {TaskKind::kTask, "waker target"});
  ASSERT_TRUE(eventually([&] { return remote.waiter_count() == 1; }));
  remote.notify_one();
  ASSERT_TRUE(eventually([&] { return waiting.load() && local.waiter_count() == 1; }));
  rt.block_on([&]() -> Task<void> {
    local.notify_one();
    co_return;
  });
  ASSERT_TRUE(eventually([&] {
    auto t = find_task(rt, "waker target");
    return t && t->wakes[static_cast<int>(WakeSource::kLocal)] == 1;
  }));
  auto t = *find_task(rt, "waker target");
  EXPECT_EQ(t.wakes[static_cast<int>(WakeSource::kRemote)], 1u);
  waiter.cancel();
  waiter.wait();
}

TEST(TaskDiagnostics, BusyQueuedAndIdleTimeAddUp) {
  Runtime rt(workers_with_diagnostics(1));
  Notify go;
  // The hog runs first (both go through the injection queue, in order) and holds the only
  // worker for 30 ms: the second task spends that long queued.
  rt.spawn_detached([] { spin_for(30ms); }, {TaskKind::kTask, "hog"});
  auto h = rt.spawn(
      [&]() -> Task<void> {
        spin_for(5ms);
        co_await go.notified();
      },
      {TaskKind::kTask, "timed"});
  ASSERT_TRUE(eventually([&] { return go.waiter_count() == 1; }));
  std::this_thread::sleep_for(20ms);  // idle time
  auto t = *find_task(rt, "timed");
  EXPECT_GE(t.busy_ns, 5'000'000u);
  EXPECT_GE(t.max_poll_ns, 5'000'000u);
  EXPECT_GE(t.scheduled_ns, 20'000'000u);
  EXPECT_LT(t.scheduled_ns, 1'000'000'000u);
  EXPECT_GE(t.idle_ns, 15'000'000u);
  EXPECT_EQ(t.busy_ns + t.scheduled_ns + t.idle_ns, t.age_ns);
  go.notify_one();
  h.wait();
}

TEST(TaskDiagnostics, ATaskRenamesItself) {
  Runtime rt(workers_with_diagnostics(1));
  Notify go;
  auto h = rt.spawn([&]() -> Task<void> {
    label_current_task({TaskKind::kConnection, "main 127.0.0.1:4000"});
    co_await go.notified();
  });
  ASSERT_TRUE(eventually([&] { return go.waiter_count() == 1; }));
  auto t = find_task(rt, "main 127.0.0.1:4000");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->kind, TaskKind::kConnection);
  go.notify_one();
  h.wait();
}

TEST(TaskDiagnostics, LongNamesAreTruncated) {
  Runtime rt(workers_with_diagnostics(1));
  std::string longname(200, 'x');
  Notify go;
  auto h = rt.spawn([&]() -> Task<void> { co_await go.notified(); }, {TaskKind::kTask, longname});
  ASSERT_TRUE(eventually([&] { return go.waiter_count() == 1; }));
  auto t = find_task(rt, std::string(kTaskNameMax - 1, 'x'));
  EXPECT_TRUE(t.has_value());
  go.notify_one();
  h.wait();
}

TEST(TaskDiagnostics, RecordsOffMeansNoRecordsButKindsStay) {
  RuntimeConfig cfg = workers_with_diagnostics(1);
  cfg.task_diagnostics = false;
  cfg.poll_timing = true;  // as the gateway runs
  Runtime rt(cfg);
  Notify go;
  auto h = rt.spawn(
      [&]() -> Task<void> {
        spin_for(3ms);
        co_await go.notified();
      },
      {TaskKind::kHealthCheck, "off"});
  ASSERT_TRUE(eventually([&] { return go.waiter_count() == 1; }));
  EXPECT_TRUE(rt.handle().scheduler()->tasks().snapshot(now_ns()).empty());
  std::vector<SlowPoll> slow;
  ASSERT_TRUE(eventually([&] {
    slow = rt.handle().scheduler()->slow_polls();
    return !slow.empty() && slow.front().duration_ns >= 3'000'000u;
  }));
  EXPECT_EQ(slow.front().kind, TaskKind::kHealthCheck);
  EXPECT_EQ(slow.front().task_id, 0u);
  go.notify_one();
  h.wait();
}

std::mutex g_reports_mu;
std::vector<LongPoll> g_reports;
void record_long_poll(const LongPoll& p) {
  std::lock_guard lk(g_reports_mu);
  g_reports.push_back(p);
}

TEST(TaskDiagnostics, LongPollsAreCountedAndReportedAtMostOnceASecond) {
  {
    std::lock_guard lk(g_reports_mu);
    g_reports.clear();
  }
  RuntimeConfig cfg = workers_with_diagnostics(1);
  cfg.long_poll_threshold = 2ms;
  cfg.on_long_poll = &record_long_poll;
  Runtime rt(cfg);
  rt.spawn([] { spin_for(4ms); }, {TaskKind::kAdmin, "blocking admin"}).wait();
  rt.spawn([] { spin_for(4ms); }, {TaskKind::kAdmin, "second"}).wait();
  rt.spawn([] { spin_for(100us); }, {TaskKind::kAdmin, "short"}).wait();
  ASSERT_TRUE(eventually([&] { return rt.stats().total().long_polls == 2; }));
  std::lock_guard lk(g_reports_mu);
  ASSERT_EQ(g_reports.size(), 1u);
  EXPECT_EQ(g_reports[0].poll.kind, TaskKind::kAdmin);
  EXPECT_EQ(g_reports[0].poll.name, "blocking admin");
  EXPECT_GE(g_reports[0].poll.duration_ns, 4'000'000u);
  EXPECT_EQ(g_reports[0].poll.worker, 0u);
}

TEST(TaskDiagnostics, SlowestPollsKeepTheSlowestWithTheirNames) {
  Runtime rt(workers_with_diagnostics(1));
  for (int i = 0; i < 20; ++i) rt.spawn([] {}, {TaskKind::kTask, "quick"}).wait();
  rt.spawn([] { spin_for(3ms); }, {TaskKind::kAdmin, "slow one"}).wait();
  // The worker records the poll just after the task completes (and wakes us).
  std::vector<SlowPoll> slow;
  ASSERT_TRUE(eventually([&] {
    slow = rt.handle().scheduler()->slow_polls();
    return !slow.empty() && slow.front().name == "slow one";
  }));
  ASSERT_FALSE(slow.empty());
  EXPECT_LE(slow.size(), SlowPollLog::kKeep * 2);
  EXPECT_EQ(slow.front().name, "slow one");
  EXPECT_EQ(slow.front().kind, TaskKind::kAdmin);
  EXPECT_GE(slow.front().duration_ns, 3'000'000u);
  EXPECT_TRUE(std::is_sorted(slow.begin(), slow.end(),
                             [](const SlowPoll& a, const SlowPoll& b) { return a.duration_ns > b.duration_ns; }));
}

TEST(TaskDiagnostics, WithoutPollTimingNothingIsTimed) {
  Runtime rt(sg::testing::workers(1));  // the library's defaults
  rt.spawn([] { spin_for(3ms); }).wait();
  ASSERT_TRUE(eventually([&] { return rt.stats().total().polls >= 1; }));
  EXPECT_EQ(rt.stats().total().poll_time.count, 0u);
  EXPECT_TRUE(rt.handle().scheduler()->slow_polls().empty());
}

TEST(TaskDiagnostics, ThePollTimeHistogramCountsEveryPoll) {
  Runtime rt(workers_with_diagnostics(1));
  rt.block_on([]() -> Task<void> {
    for (int i = 0; i < 50; ++i) co_await yield_now();
  });
  ASSERT_TRUE(eventually([&] {
    auto tot = rt.stats().total();
    return tot.poll_time.count == tot.polls && tot.polls >= 51;
  }));
  auto tot = rt.stats().total();
  uint64_t in_buckets = 0;
  for (auto b : tot.poll_time.buckets) in_buckets += b;
  EXPECT_EQ(in_buckets, tot.poll_time.count);
}

}  // namespace
}  // namespace sg::exec
