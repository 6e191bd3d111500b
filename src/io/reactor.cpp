#include "io/reactor.h"

#include <asio/post.hpp>

namespace sg::io {

Reactor::Reactor()
    : ioc_(std::make_unique<asio::io_context>()),
      guard_(std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(
          ioc_->get_executor())),
      epoll_(&asio::use_service<asio::detail::reactor>(*ioc_)),
      scheduler_(&asio::use_service<asio::detail::scheduler>(*ioc_)) {
  // Sockets register with the epoll reactor directly (io/reactor_fd.h), not through an
  // Asio I/O object, whose service would otherwise be what makes run_one() poll it.
  epoll_->init_task();
}

Reactor::~Reactor() { shutdown(); }

uint32_t Reactor::park(uint32_t max_events, std::optional<std::chrono::milliseconds> timeout) {
  // One blocking wait for the first completion (epoll_wait with the timers' timeout:
  // run_one_for blocks in the reactor, it arms no Asio timer), then whatever else is ready.
  if ((timeout ? ioc_->run_one_for(*timeout) : ioc_->run_one()) == 0) return 0;
  uint32_t n = 1;
  while (n < max_events && ioc_->poll_one() != 0) ++n;
  return n;
}

uint32_t Reactor::poll(uint32_t max_events) {
  uint32_t n = 0;
  while (n < max_events && ioc_->poll_one() != 0) ++n;
  return n;
}

void Reactor::unpark() {
  if (wake_pending_.exchange(true, std::memory_order_acq_rel)) return;
  // The handler only clears the flag; its arrival is what makes run_one() return.
  asio::post(*ioc_, [this] { wake_pending_.store(false, std::memory_order_release); });
}

void Reactor::shutdown() {
  if (!ioc_) return;
  guard_.reset();
  ioc_->stop();
  // Destroying the io_context destroys every pending operation; our handlers then abort
  // their waits, which drops the waiting tasks (executor shutdown is complete by now).
  ioc_.reset();
}

}  // namespace sg::io
