// The I/O driver seam. The executor knows nothing about sockets: a parked worker that wins
// the driver blocks in it; completions it dispatches schedule tasks onto that worker.
// src/io/ implements it with Asio's reactor.
#pragma once

#include <cstdint>
#include <mutex>

namespace sg::exec {

class Driver {
 public:
  virtual ~Driver() = default;
  // Blocks until at least one event is ready or unpark() is called, then dispatches up
  // to `max_events` ready completions. Called by at most one thread at a time.
  virtual void park(uint32_t max_events) = 0;
  // Dispatches up to `max_events` ready completions without blocking.
  virtual void poll(uint32_t max_events) = 0;
  // Makes a concurrent or the next park() return. Any thread, any time.
  virtual void unpark() = 0;
  // Destroys everything still pending (handlers complete their waits as aborted). Called
  // once, after the workers have stopped.
  virtual void shutdown() = 0;
};

// The one driver shared by all workers of a runtime; whoever holds `lock` drives it.
struct SharedDriver {
  Driver* driver = nullptr;  // null: no I/O, parked workers only sleep
  std::mutex lock;
};

}  // namespace sg::exec
