// The I/O driver: Asio's io_context used only as the epoll reactor (timers are the
// executor's, exec/timers.h; a park blocks in epoll_wait for at most their timeout).
//
// No user code runs inside the io_context: completion handlers installed by src/io only
// record the result and wake the waiting task (exec::Waker), which then runs on a worker.
// The io_context is driven by whichever parked worker wins the executor's driver lock
// (run_one blocks in epoll_wait), or polled without blocking by a busy worker every
// event_interval ticks.
#pragma once

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
// (after io_context.hpp, which they need first)
#include <asio/detail/reactor.hpp>
#include <asio/detail/scheduler.hpp>

#include <atomic>
#include <cstdint>
#include <memory>

#include "exec/driver.h"

namespace sg::io {

class Reactor final : public exec::Driver {
 public:
  Reactor();
  ~Reactor() override;

  asio::io_context& context() { return *ioc_; }
  // The io_context's epoll reactor and its scheduler (which counts queued operations as
  // work), looked up once: a service lookup takes the io_context's registry mutex.
  asio::detail::reactor& epoll() { return *epoll_; }
  asio::detail::scheduler& scheduler() { return *scheduler_; }

  uint32_t park(uint32_t max_events, std::optional<std::chrono::milliseconds> timeout) override;
  uint32_t poll(uint32_t max_events) override;
  void unpark() override;
  // Visited whenever a worker runs dry, like a ring: nothing to flush, and whether events
  // are ready takes a syscall to know, so they may be. The worker yields its CPU, then
  // polls (epoll_wait, zero timeout) before it steals or parks. With the reactor only in
  // the park, a worker that ran dry slept in epoll_wait and was woken for the next event
  // (or by the worker that took it) while the load generator and the backend were still
  // making the next ones: 0.04 futex wakes and 0.2 epoll_wait per small GET (now 0.005
  // and 0.55). Measured on 2 CPUs (tests/bench/proxy_ab.sh, epoll, before/after, two runs):
  // a connection per request 0.89x and 0.86x CPU per request, 1.08x and 1.13x req/s;
  // small GETs p99 0.62-0.70x at 1.00-1.03x CPU; 1,000 connections 0.93x and 1.00x CPU.
  bool visited_when_idle() const override { return true; }
  bool flush() override { return true; }
  void shutdown() override;

 private:
  std::unique_ptr<asio::io_context> ioc_;
  // Keeps run_one() blocking when no operation is pending (TOOLCHAIN.md §5.4).
  std::unique_ptr<asio::executor_work_guard<asio::io_context::executor_type>> guard_;
  asio::detail::reactor* epoll_;
  asio::detail::scheduler* scheduler_;
  // Coalesces unpark() calls: at most one wake-up handler is queued at a time.
  std::atomic<bool> wake_pending_{false};
};

}  // namespace sg::io
