// An executor runtime with an I/O driver: Asio's reactor (epoll), shared by the workers,
// or io_uring, a ring per worker. `auto` takes io_uring where the kernel allows it.
#pragma once

#include <asio/io_context.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "exec/runtime.h"
#include "io/socket.h"

namespace sg::io {

class Reactor;

enum class IoDriverKind { kEpoll, kIoUring };
std::string_view io_driver_name(IoDriverKind k);

// The driver `setting` ("auto", "io_uring" or "epoll") selects here. `auto` falls back to
// epoll when io_uring_setup fails, with the reason in `why`; "io_uring" where it fails is
// an error naming the reason.
Result<IoDriverKind> choose_io_driver(std::string_view setting, std::string& why);

// One io_uring worker's ring, for the metrics (io_uring runtimes only).
struct RingStats {
  std::size_t in_flight = 0;    // operations submitted and not yet completed
  uint64_t cancels = 0;         // cancels sent by the ring's own worker
  uint64_t remote_cancels = 0;  // cancels queued to it from other threads
  std::size_t buffers_provided = 0;  // receive buffers the ring has been given (it grows on demand)
  std::size_t buffers_in_use = 0;    // provided receive buffers holding bytes not yet read
  uint64_t buffer_shortages = 0;     // receives that found no free buffer
};

class Runtime {
 public:
  // The epoll (reactor) runtime; it cannot fail.
  explicit Runtime(exec::RuntimeConfig cfg = {});
  // A runtime on `kind`; io_uring fails when a ring cannot be set up.
  static Result<std::unique_ptr<Runtime>> create(exec::RuntimeConfig cfg, IoDriverKind kind);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  exec::Runtime& exec() { return *rt_; }
  exec::Handle handle() const { return rt_->handle(); }
  IoDriverKind driver_kind() const { return kind_; }
  // Where this runtime's sockets are created.
  IoContext context() const { return IoContext{reactor_}; }
  // Each worker's ring, in worker order; empty on epoll.
  std::vector<RingStats> ring_stats() const;
  // The reactor's io_context, for Asio I/O objects (AsioExecutor); epoll runtimes only.
  asio::io_context& asio_context();

  template <class F>
  auto spawn(F&& f, const exec::TaskLabel& label = {}) {
    return rt_->spawn(std::forward<F>(f), label);
  }
  template <class F>
  auto block_on(F&& f) {
    return rt_->block_on(std::forward<F>(f));
  }
  void shutdown() { rt_->shutdown(); }

 private:
  struct Empty {};
  explicit Runtime(Empty) {}
  IoDriverKind kind_ = IoDriverKind::kEpoll;
  Reactor* reactor_ = nullptr;  // epoll: the reactor (owned inside rt_)
  std::unique_ptr<exec::Runtime> rt_;
};

}  // namespace sg::io
