// The kernel's per-thread scheduling figures behind stealgate_executor_worker_cpu_seconds_total
// and ..._cpu_wait_seconds_total: a thread's CPU time grows with the work it does, and two
// threads that share one CPU each wait for it while the other runs; the exporter shows
// both series for a running worker.
#include "metrics/process_stats.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "io/runtime.h"
#include "metrics/exporter.h"
#include "proxy/gateway.h"
#include "series_value.h"

namespace sg {
namespace {

// Busy until the wall clock has moved `d` on.
void spin_for(std::chrono::milliseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  volatile unsigned sink = 0;
  while (std::chrono::steady_clock::now() < until) sink = sink + 1;
}

double thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

TEST(ThreadCpuStats, CpuTimeGrowsWithTheThreadsWork) {
  const int tid = static_cast<int>(::gettid());
  const std::optional<metrics::ThreadCpuStats> before = metrics::read_thread_cpu_stats(tid);
  ASSERT_TRUE(before.has_value()) << "no /proc/self/task/" << tid << "/schedstat";
  const double cpu0 = thread_cpu_seconds();
  while (thread_cpu_seconds() - cpu0 < 0.05) {
  }
  const std::optional<metrics::ThreadCpuStats> after = metrics::read_thread_cpu_stats(tid);
  ASSERT_TRUE(after.has_value());
  EXPECT_GE(after->cpu_seconds - before->cpu_seconds, 0.045);
  EXPECT_FALSE(metrics::read_thread_cpu_stats(0).has_value());
}

TEST(ThreadCpuStats, TwoThreadsOnOneCpuEachWaitWhileTheOtherRuns) {
  cpu_set_t mine;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(mine), &mine), 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &mine)) ++cpu;
  ASSERT_LT(cpu, CPU_SETSIZE);
  double waited[2] = {-1, -1};
  auto spinner = [cpu](double& out) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    ASSERT_EQ(::pthread_setaffinity_np(::pthread_self(), sizeof(one), &one), 0);
    const int tid = static_cast<int>(::gettid());
    const auto before = metrics::read_thread_cpu_stats(tid);
    spin_for(std::chrono::milliseconds(300));
    const auto after = metrics::read_thread_cpu_stats(tid);
    ASSERT_TRUE(before && after);
    out = after->wait_seconds - before->wait_seconds;
  };
  std::thread a(spinner, std::ref(waited[0]));
  std::thread b(spinner, std::ref(waited[1]));
  a.join();
  b.join();
  // 300 ms each on one CPU: between them they waited about as long as they ran (some of
  // it may fall outside a thread's window when one starts before the other).
  EXPECT_GE(waited[0], 0);
  EXPECT_GE(waited[1], 0);
  EXPECT_GE(waited[0] + waited[1], 0.1) << waited[0] << " + " << waited[1];
}

TEST(ThreadCpuStats, TheExporterShowsEachWorkersCpuAndWait) {
  exec::RuntimeConfig cfg;
  cfg.worker_threads = 1;
  io::Runtime rt(cfg);
  proxy::Gateway gw(rt);
  rt.exec().block_on([]() -> exec::Task<void> {  // 20 ms of the worker's CPU time
    const double start = thread_cpu_seconds();
    while (thread_cpu_seconds() - start < 0.02) {
    }
    co_return;
  });
  const std::vector<int> tids = rt.exec().worker_thread_ids();
  ASSERT_EQ(tids.size(), 1u);
  ASSERT_GT(tids[0], 0);
  const std::string text = metrics::render(gw, metrics::read_process_stats(tids));
  EXPECT_GE(testing::series_value(text, "stealgate_executor_worker_cpu_seconds_total{worker=\"0\"}"), 0.015)
      << text;
  EXPECT_GE(testing::series_value(text, "stealgate_executor_worker_cpu_wait_seconds_total{worker=\"0\"}"), 0.0);
  // Without the workers' ids (or on a kernel without schedstat) the families are absent.
  EXPECT_EQ(metrics::render(gw, metrics::read_process_stats()).find("worker_cpu_seconds"), std::string::npos);
}

}  // namespace
}  // namespace sg
