#include "io/runtime.h"

#include <cassert>
#include <thread>
#include <vector>

#include "exec/scheduler.h"
#include "io/reactor.h"
#include "io/uring.h"

namespace sg::io {

std::string_view io_driver_name(IoDriverKind k) { return k == IoDriverKind::kIoUring ? "io_uring" : "epoll"; }

Result<IoDriverKind> choose_io_driver(std::string_view setting, std::string& why) {
  if (setting == "epoll") return IoDriverKind::kEpoll;
  if (UringDriver::available(why)) return IoDriverKind::kIoUring;
  if (setting == "io_uring") return std::make_error_code(std::errc::function_not_supported);
  return IoDriverKind::kEpoll;  // auto
}

Runtime::Runtime(exec::RuntimeConfig cfg) {
  auto reactor = std::make_unique<Reactor>();
  reactor_ = reactor.get();
  rt_ = std::make_unique<exec::Runtime>(cfg, std::move(reactor));
}

Result<std::unique_ptr<Runtime>> Runtime::create(exec::RuntimeConfig cfg, IoDriverKind kind) {
  if (kind == IoDriverKind::kEpoll) return std::make_unique<Runtime>(cfg);
  // Every ring first, so that a failure is an error here rather than in a worker. They
  // are set up on a thread of their own: the kernel registers a ring's creator with it and
  // sends it task work at teardown, which interrupts that thread's blocking syscalls
  // (EINTR); this thread has exited by then.
  const std::size_t n = exec::resolve(cfg).worker_threads;
  auto rings = std::make_shared<std::vector<std::unique_ptr<exec::Driver>>>();
  std::error_code failed;
  std::thread([&] {
    for (std::size_t i = 0; i < n && !failed; ++i) {
      auto ring = UringDriver::create();
      if (ring.ok()) rings->push_back(std::move(*ring));
      else failed = ring.error();
    }
  }).join();
  if (failed) return failed;
  std::unique_ptr<Runtime> rt(new Runtime(Empty{}));
  rt->kind_ = IoDriverKind::kIoUring;
  rt->rt_ = std::make_unique<exec::Runtime>(cfg, [rings](std::size_t worker) {
    assert(worker < rings->size());
    return std::move((*rings)[worker]);
  });
  return rt;
}

Runtime::~Runtime() { rt_.reset(); }

std::vector<RingStats> Runtime::ring_stats() const {
  std::vector<RingStats> out;
  if (kind_ != IoDriverKind::kIoUring) return out;
  exec::Scheduler* s = rt_->handle().scheduler();
  for (std::size_t i = 0; i < s->num_workers(); ++i) {
    const auto* ring = static_cast<const UringDriver*>(s->driver_slot(i).driver);
    out.push_back({ring->in_flight(), ring->cancels(), ring->remote_cancels(), ring->buffers_provided(),
                   ring->buffers_in_use(), ring->buffer_shortages()});
  }
  return out;
}

asio::io_context& Runtime::asio_context() {
  assert(reactor_ != nullptr && "asio_context() on an io_uring runtime");
  return reactor_->context();
}

}  // namespace sg::io
