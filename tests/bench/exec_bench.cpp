// exec_bench: stealgate's executor under the contract of ../shared/bench/executor/README.md
//
//   WORKERS=2 ITERS=3 WARMUP=1 ENABLE_IO=1 exec_bench <workload> <N>
//   -> one line per timed iteration: stealgate <workload> <N> <seconds> <ops_per_sec>
//
// ENABLE_IO=1 gives the runtime its Asio reactor driver (a parked worker sleeps in
// epoll_wait, as in the gateway); 0 runs the pure scheduler. Extra knobs for experiments:
// LIFO=0, STEAL=0, GQI=<n> (global queue interval), ADAPTIVE=1, STATS=1 (prints counters).
#include <cstdio>
#include <memory>
#include <string>

#include "io/runtime.h"
#include "workloads.h"

int main(int argc, char** argv) {
  using namespace sg;
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s <spawn_many_local|spawn_many_remote|yield_many|ping_pong|chained_spawn> [N]\n",
                 argv[0]);
    return 2;
  }
  std::string workload = argv[1];
  std::size_t n = 1'000'000;
  if (argc > 2) {
    std::string s;
    for (const char* p = argv[2]; *p; ++p)
      if (*p != '_') s.push_back(*p);
    n = std::strtoull(s.c_str(), nullptr, 10);
  }
  bench::Workload f = bench::workload_by_name(workload);
  if (f == nullptr) {
    std::fprintf(stderr, "unknown workload %s\n", workload.c_str());
    return 2;
  }

  exec::RuntimeConfig cfg;
  cfg.worker_threads = std::max<std::size_t>(1, bench::env_size("WORKERS", 2));
  cfg.lifo_slot = bench::env_size("LIFO", 1) != 0;
  cfg.work_stealing = bench::env_size("STEAL", 1) != 0;
  cfg.global_queue_interval = static_cast<uint32_t>(bench::env_size("GQI", exec::kDefaultGlobalQueueInterval));
  cfg.adaptive_global_queue_interval = bench::env_size("ADAPTIVE", 0) != 0;
  std::size_t iters = bench::env_size("ITERS", 1);
  std::size_t warmup = bench::env_size("WARMUP", 1);
  bool enable_io = bench::env_size("ENABLE_IO", 1) != 0;

  std::unique_ptr<io::Runtime> io_rt;
  std::unique_ptr<exec::Runtime> plain_rt;
  exec::Runtime* rt;
  if (enable_io) {
    io_rt = std::make_unique<io::Runtime>(cfg);
    rt = &io_rt->exec();
  } else {
    plain_rt = std::make_unique<exec::Runtime>(cfg);
    rt = plain_rt.get();
  }

  for (std::size_t i = 0; i < warmup; ++i) f(*rt, n);
  for (std::size_t i = 0; i < iters; ++i) {
    double s = f(*rt, n);
    std::printf("stealgate %s %zu %.6f %.0f\n", workload.c_str(), n, s, s > 0 ? static_cast<double>(n) / s : 0.0);
    std::fflush(stdout);
  }
  if (bench::env_size("STATS", 0) != 0) {
    auto st = rt->stats();
    auto t = st.total();
    std::fprintf(stderr,
                 "stats: polls=%lu local_schedules=%lu remote=%lu steals=%lu steal_ops=%lu overflows=%lu "
                 "lifo_hits=%lu lifo_capped=%lu forced_yields=%lu parks=%lu driver_polls=%lu inject=%lu\n",
                 t.polls, t.local_schedules, st.remote_schedules, t.steals, t.steal_operations, t.overflows,
                 t.lifo_hits, t.lifo_capped, t.forced_yields, t.parks, t.driver_polls, st.injection_queue_depth);
  }
  return 0;
}
