// The five executor workloads of ../shared/bench/executor, on stealgate's executor. Shared
// by exec_bench (the harness contract) and the Google Benchmark suite. Semantics match
// the anchors (tokio/src/main.rs, asio/asio_bench.cpp): every spawned unit is a real
// task with its own state whose completion is observable (spawn returns a JoinHandle,
// dropped here as Tokio's benchmark drops its JoinHandle).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "exec/notify.h"
#include "exec/runtime.h"

namespace sg::bench {

inline std::size_t env_size(const char* key, std::size_t def) {
  const char* v = std::getenv(key);
  if (v == nullptr || *v == '\0') return def;
  std::string s;
  for (const char* p = v; *p; ++p)
    if (*p != '_') s.push_back(*p);
  return std::strtoull(s.c_str(), nullptr, 10);
}

// Completion latch: `target` hits release the waiting (non-runtime) thread.
struct Latch {
  std::atomic<std::size_t> hits{0};
  std::size_t target;
  std::atomic<bool> done{false};
  explicit Latch(std::size_t t) : target(t) {
    if (t == 0) fire();
  }
  void hit() {
    if (hits.fetch_add(1, std::memory_order_acq_rel) + 1 == target) fire();
  }
  void fire() {
    done.store(true, std::memory_order_release);
    done.notify_all();
  }
  void wait() {
    while (!done.load(std::memory_order_acquire)) done.wait(false, std::memory_order_acquire);
  }
};

using Clock = std::chrono::steady_clock;
inline double secs_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Spawn as the anchors do: a task with a JoinHandle that is dropped at once.
template <class F>
inline void spawn_and_drop(F&& f) {
  (void)exec::spawn(std::forward<F>(f));
}

inline double spawn_many_local(exec::Runtime& rt, std::size_t n) {
  Latch latch(n);
  Latch* l = &latch;
  auto t0 = Clock::now();
  rt.spawn_detached([l, n] {
    for (std::size_t i = 0; i < n; ++i) spawn_and_drop([l] { l->hit(); });
  });
  latch.wait();
  return secs_since(t0);
}

inline double spawn_many_remote(exec::Runtime& rt, std::size_t n) {
  Latch latch(n);
  Latch* l = &latch;
  exec::Handle h = rt.handle();
  auto t0 = Clock::now();
  for (std::size_t i = 0; i < n; ++i) (void)h.spawn([l] { l->hit(); });
  latch.wait();
  return secs_since(t0);
}

inline double yield_many(exec::Runtime& rt, std::size_t n) {
  std::size_t tasks = std::max<std::size_t>(1, std::min(env_size("YIELD_TASKS", 1000), std::max<std::size_t>(n, 1)));
  std::size_t per = n / tasks;
  Latch latch(tasks);
  Latch* l = &latch;
  auto t0 = Clock::now();
  for (std::size_t i = 0; i < tasks; ++i) {
    (void)rt.spawn([l, per]() -> exec::Task<void> {
      for (std::size_t k = 0; k < per; ++k) co_await exec::yield_now();
      l->hit();
    });
  }
  latch.wait();
  return secs_since(t0);
}

inline double ping_pong(exec::Runtime& rt, std::size_t n) {
  std::size_t pairs = std::max<std::size_t>(1, std::min(env_size("PP_PAIRS", 1000), std::max<std::size_t>(n, 1)));
  std::size_t rounds = n / pairs;
  Latch latch(rounds == 0 ? 0 : pairs);
  Latch* l = &latch;
  std::vector<std::unique_ptr<exec::Notify>> notifies;
  notifies.reserve(2 * pairs);
  for (std::size_t i = 0; i < 2 * pairs; ++i) notifies.push_back(std::make_unique<exec::Notify>());
  auto t0 = Clock::now();
  if (rounds > 0) {
    for (std::size_t p = 0; p < pairs; ++p) {
      exec::Notify* ping = notifies[2 * p].get();
      exec::Notify* pong = notifies[2 * p + 1].get();
      (void)rt.spawn([ping, pong, rounds]() -> exec::Task<void> {
        for (std::size_t i = 0; i < rounds; ++i) {
          co_await ping->notified();
          pong->notify_one();
        }
      });
      (void)rt.spawn([ping, pong, rounds, l]() -> exec::Task<void> {
        for (std::size_t i = 0; i < rounds; ++i) {
          ping->notify_one();
          co_await pong->notified();
        }
        l->hit();
      });
    }
  }
  latch.wait();
  double s = secs_since(t0);
  return s;
}

struct Chain {
  Latch* latch;
  std::size_t left;
  void operator()() const {
    if (left == 0) {
      latch->hit();
      return;
    }
    spawn_and_drop(Chain{latch, left - 1});
  }
};

inline double chained_spawn(exec::Runtime& rt, std::size_t n) {
  Latch latch(1);
  auto t0 = Clock::now();
  rt.spawn_detached(Chain{&latch, n});
  latch.wait();
  return secs_since(t0);
}

using Workload = double (*)(exec::Runtime&, std::size_t);

inline Workload workload_by_name(const std::string& name) {
  if (name == "spawn_many_local") return spawn_many_local;
  if (name == "spawn_many_remote") return spawn_many_remote;
  if (name == "yield_many") return yield_many;
  if (name == "ping_pong") return ping_pong;
  if (name == "chained_spawn") return chained_spawn;
  return nullptr;
}

}  // namespace sg::bench
