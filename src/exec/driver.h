// The I/O driver seam. The executor knows nothing about sockets: a parked worker blocks in
// its driver; completions it dispatches schedule tasks onto that worker. A runtime has one
// driver shared by its workers (whoever parks first drives it: src/io's Asio reactor) or
// one per worker, each driven by its worker alone (src/io's io_uring driver, a ring each).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

namespace sg::exec {

class Driver {
 public:
  virtual ~Driver() = default;
  // Blocks until at least one event is ready, unpark() is called or `timeout` (when
  // given) has passed, then dispatches up to `max_events` ready completions. Called by at
  // most one thread at a time (a per-worker driver: always its worker). Returns how many
  // it dispatched.
  virtual uint32_t park(uint32_t max_events, std::optional<std::chrono::milliseconds> timeout) = 0;
  // Dispatches up to `max_events` ready completions without blocking; returns how many.
  virtual uint32_t poll(uint32_t max_events) = 0;
  // Makes a concurrent or the next park() return. Any thread, any time.
  virtual void unpark() = 0;
  // A per-worker driver learns its worker's thread: attach() runs on it when the worker
  // starts, detach() before it exits.
  virtual void attach() {}
  virtual void detach() {}
  // Called whenever a worker's local queue runs dry (before it steals or parks), on a driver
  // whose visited_when_idle() says so: one that queues submissions (io_uring) flushes them
  // here. Returns whether completions may be ready for a poll() to dispatch now (posted, or
  // waiting to be run by the next entry into the kernel; a driver that cannot tell without
  // a syscall, the epoll reactor, says they may): the worker then yields its CPU once and
  // takes them, instead of stealing or parking (exec/worker.cpp). Others leave
  // visited_when_idle() false and are not called.
  virtual bool visited_when_idle() const { return false; }
  virtual bool flush() { return false; }
  // Destroys everything still pending (handlers complete their waits as aborted). Called
  // once, after the workers have stopped: a per-worker driver by its worker's thread, as
  // the last thing it does (an io_uring ring takes submissions from that thread only).
  virtual void shutdown() = 0;
};

// The driver of a runtime without I/O: its holder only sleeps until unparked or until
// the next timer is due.
class SleepDriver final : public Driver {
 public:
  uint32_t park(uint32_t /*max_events*/, std::optional<std::chrono::milliseconds> timeout) override {
    std::unique_lock lk(mu_);
    auto woken = [this] { return notified_; };
    if (timeout) cv_.wait_for(lk, *timeout, woken);
    else cv_.wait(lk, woken);
    notified_ = false;
    return 0;
  }
  uint32_t poll(uint32_t /*max_events*/) override { return 0; }
  void unpark() override {
    { std::lock_guard lk(mu_); notified_ = true; }
    cv_.notify_one();
  }
  void shutdown() override {}

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool notified_ = false;
};

// Makes worker `i`'s own driver, for a runtime whose workers each drive their own I/O.
using DriverFactory = std::function<std::unique_ptr<Driver>(std::size_t worker)>;

// What a worker parks in: the runtime's one shared driver (every worker's slot is the same
// one, and whoever holds `lock` drives it and every timer), or the worker's own driver (its
// own slot: the lock is never contended, and it drives its own timer shard).
class Timers;
struct DriverSlot {
  Driver* driver = nullptr;  // the I/O driver, or a SleepDriver when there is no I/O
  Timers* timers = nullptr;
  std::size_t timer_group = 0;  // the timers this slot's holder advances (Timers groups)
  bool own = false;             // a per-worker driver: attached to and flushed by its worker
  bool visited_when_idle = false;  // driver->visited_when_idle()
  std::mutex lock;
};

}  // namespace sg::exec
