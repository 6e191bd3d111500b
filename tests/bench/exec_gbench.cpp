// Google Benchmark suite for the executor: the same five workloads as exec_bench, plus
// policy variants (no LIFO slot, no stealing) to show what each mechanism is worth.
// Throughput only; comparisons against the anchors live in ../shared/bench/executor.
#include <benchmark/benchmark.h>

#include <memory>

#include "workloads.h"

namespace {

using namespace sg;

void run(benchmark::State& state, bench::Workload f, exec::RuntimeConfig cfg) {
  std::size_t n = static_cast<std::size_t>(state.range(0));
  exec::Runtime rt(cfg);
  f(rt, n / 10);  // warm the allocator caches
  for (auto _ : state) {
    double s = f(rt, n);
    state.SetIterationTime(s);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

exec::RuntimeConfig config(std::size_t workers, bool lifo = true, bool steal = true) {
  exec::RuntimeConfig c;
  c.worker_threads = workers;
  c.lifo_slot = lifo;
  c.work_stealing = steal;
  return c;
}

void BM_SpawnManyLocal(benchmark::State& s) { run(s, bench::spawn_many_local, config(2)); }
void BM_SpawnManyRemote(benchmark::State& s) { run(s, bench::spawn_many_remote, config(2)); }
void BM_YieldMany(benchmark::State& s) { run(s, bench::yield_many, config(2)); }
void BM_PingPong(benchmark::State& s) { run(s, bench::ping_pong, config(2)); }
void BM_ChainedSpawn(benchmark::State& s) { run(s, bench::chained_spawn, config(2)); }
void BM_SpawnManyLocal_NoSteal(benchmark::State& s) { run(s, bench::spawn_many_local, config(2, true, false)); }
void BM_PingPong_NoLifo(benchmark::State& s) { run(s, bench::ping_pong, config(2, false)); }
void BM_ChainedSpawn_NoLifo(benchmark::State& s) { run(s, bench::chained_spawn, config(2, false)); }
void BM_SpawnManyLocal_1Worker(benchmark::State& s) { run(s, bench::spawn_many_local, config(1)); }

constexpr int64_t kN = 200'000;
BENCHMARK(BM_SpawnManyLocal)->Arg(kN)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SpawnManyRemote)->Arg(kN)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_YieldMany)->Arg(kN)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PingPong)->Arg(kN)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ChainedSpawn)->Arg(kN)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SpawnManyLocal_NoSteal)->Arg(kN)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PingPong_NoLifo)->Arg(kN)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ChainedSpawn_NoLifo)->Arg(kN)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SpawnManyLocal_1Worker)->Arg(kN)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
