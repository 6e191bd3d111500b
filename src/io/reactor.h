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

  uint32_t park(uint32_t max_events, std::optional<std::chrono::milliseconds> timeout) override;
  uint32_t poll(uint32_t max_events) override;
  void unpark() override;
  void shutdown() override;

 private:
  std::unique_ptr<asio::io_context> ioc_;
  // Keeps run_one() blocking when no operation is pending (TOOLCHAIN.md §5.4).
  std::unique_ptr<asio::executor_work_guard<asio::io_context::executor_type>> guard_;
  // Coalesces unpark() calls: at most one wake-up handler is queued at a time.
  std::atomic<bool> wake_pending_{false};
};

}  // namespace sg::io
