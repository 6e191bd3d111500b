#include "io/reactor_fd.h"

#include <poll.h>

#include <asio/detail/reactor_op.hpp>
#include <asio/error.hpp>

#include "exec/alloc.h"
#include "io/reactor.h"

namespace sg::io {

namespace {

using asio::detail::reactor;
using asio::detail::reactor_op;

// Whether `fd` is ready for `events` now (a hang-up or an error counts: poll reports them
// whatever was asked).
bool is_ready(int fd, short events) {
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, 0) == 1;
}

// One readiness wait, queued on the descriptor like Asio's own operations (the protocol
// is in the header). Its memory comes from the executor's task allocator.
class ReadinessOp final : public reactor_op {
 public:
  ReadinessOp(int fd, bool writable, bool consuming, exec::Waker w, std::size_t tag)
      : reactor_op(asio::error_code(), &ReadinessOp::perform, &ReadinessOp::complete),
        waker_(std::move(w)),
        tag_(tag),
        fd_(fd),
        events_(writable ? POLLOUT : POLLIN),
        consuming_(consuming) {}

  // The registration that was to hold this wait failed: it completes with `ec`.
  void fail(int e) { failed_ = e; }

  static void* operator new(std::size_t n) { return exec::task_alloc(n); }
  static void operator delete(void* p, std::size_t n) noexcept { exec::task_free(p, n); }

  // Set on the starting thread around reactor::start_op: a perform() of this operation on
  // that thread is the reactor's speculative call, made before the operation is queued
  // (no other thread can see it yet), not one for an event.
  static thread_local ReadinessOp* starting;

 private:
  bool wake() { return std::move(waker_).wake({std::error_code{}, tag_}, exec::ScheduleKind::kDriver); }

  // Under the descriptor's mutex.
  static status perform(reactor_op* base) {
    auto* op = static_cast<ReadinessOp*>(base);
    if (op == starting) {
      // The flag is set: an edge came that no waiting task took. Still ready?
      if (is_ready(op->fd_, op->events_)) op->wake();
      return not_done;  // queued either way: start never posts a completion
    }
    if (!op->waker_) return done;  // it woke its task when it started
    const bool won = op->wake();
    const bool last = asio::detail::op_queue_access::next(base) == nullptr;
    return won && last && op->consuming_ ? done_and_exhausted : done;
  }

  // `owner` null: the reactor is being destroyed (shutdown) and drops its operations.
  static void complete(void* owner, asio::detail::operation* base, const asio::error_code& ec, std::size_t) {
    auto* op = static_cast<ReadinessOp*>(base);
    exec::Waker w = std::move(op->waker_);
    const std::size_t tag = op->tag_;
    const int failed = op->failed_;
    delete op;
    // Still holding its waker only when no event came: deregistered (aborted), dropped,
    // or never registered.
    if (!w) return;
    std::error_code why = owner != nullptr ? ec : asio::error::operation_aborted;
    if (failed != 0) why = {failed, std::system_category()};
    std::move(w).wake({why, tag}, exec::ScheduleKind::kDriver);
  }

  exec::Waker waker_;
  std::size_t tag_;
  int fd_;
  short events_;
  bool consuming_;  // its task reads or writes next (not a watch)
  int failed_ = 0;  // errno of the registration meant to hold it
};

thread_local ReadinessOp* ReadinessOp::starting = nullptr;

// Registers `fd` with `r` at its first wait, a readable one with `op` queued; false (and
// `op` completed with the error) when the registration failed.
bool register_at_first_wait(Reactor& r, int fd, reactor::per_descriptor_data& data, ReadinessOp* op,
                            bool writable) {
  if (writable) {
    if (int e = r.epoll().register_descriptor(fd, data); e != 0) {
      r.epoll().cleanup_descriptor_data(data);
      op->fail(e);
      op->destroy();  // (completes it with e)
      return false;
    }
    return true;
  }
  // Registered with the wait in its queue: the socket was found empty (its last read, or
  // the poll before it) before the EPOLL_CTL_ADD, which reports what came since. A queued
  // operation counts as the io_context's work until it completes: start_op counts it, this
  // registration does not, and an operation that completed uncounted would let the count
  // reach zero, which stops the io_context.
  r.scheduler().work_started();
  if (int e = r.epoll().register_internal_descriptor(reactor::read_op, fd, data, op); e != 0) {
    op->fail(e);
    r.epoll().deregister_internal_descriptor(fd, data);  // (destroys the wait: it completes with e)
    r.epoll().cleanup_descriptor_data(data);
    r.scheduler().work_finished();
    return false;
  }
  return true;
}

}  // namespace

ReactorFd::~ReactorFd() {
  if (data_ == nullptr) return;  // (never registered)
  reactor_.epoll().deregister_descriptor(fd_, data_, /*closing=*/!may_be_duplicated_);
  reactor_.epoll().cleanup_descriptor_data(data_);
}

void ReactorFd::start_wait(bool writable, bool check_now, bool consuming, exec::Waker w, std::size_t tag) {
  if (check_now && is_ready(fd_, writable ? POLLOUT : POLLIN)) {
    std::move(w).wake({std::error_code{}, tag}, exec::ScheduleKind::kDriver);
    return;
  }
  auto* op = new ReadinessOp(fd_, writable, consuming, std::move(w), tag);
  if (data_ == nullptr) {
    if (!register_at_first_wait(reactor_, fd_, data_, op, writable)) return;
    if (!writable) return;  // (queued with the registration)
  }
  ReadinessOp::starting = op;
  reactor_.epoll().start_op(writable ? reactor::write_op : reactor::read_op, fd_, data_, op,
                            /*is_continuation=*/false, /*allow_speculative=*/true);
  ReadinessOp::starting = nullptr;
}

}  // namespace sg::io
