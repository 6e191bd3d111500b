#include "io/wait.h"

#include <poll.h>

#include "io/uring.h"

namespace sg::io {

void ReadyWait::start(Socket& s, Interest what, exec::Waker w, std::size_t tag, WaitRole role) {
  if (ReactorFd* r = s.reactor_handle()) {
    // A write waits only after a write (or connect) that would have blocked: nothing to
    // look at first (io/reactor_fd.h).
    const bool writable = what == Interest::kWrite;
    const bool check_now = !writable && !s.read_drained();
    r->start_wait(writable, check_now, role == WaitRole::kIo, std::move(w), tag);
    return;
  }
  UringDriver* ring = current_ring();
  if (ring == nullptr || !s.is_open()) {
    // A socket of neither driver (closed, or waited on off the workers of an io_uring
    // runtime): the wait fails at once instead of never completing.
    const std::errc why = s.is_open() ? std::errc::operation_not_supported : std::errc::bad_file_descriptor;
    std::move(w).wake({std::make_error_code(why), tag}, exec::ScheduleKind::kDriver);
    return;
  }
  op_ = ring->start_poll(s.native_handle(), what == Interest::kRead ? POLLIN : POLLOUT, std::move(w), tag);
}

void ReadyWait::cancel() noexcept {
  if (op_ == nullptr) return;
  cancel_and_release(op_);
  op_ = nullptr;
}

void ReceiveWait::start(Socket& s, exec::Waker w, std::size_t tag, WaitRole role) {
  UringOp*& op = s.receive_op();
  UringDriver* ring = s.reactor_handle() == nullptr ? current_ring() : nullptr;
  if (op == nullptr && (ring == nullptr || !ring->receives() || !s.is_open())) {
    poll_.start(s, Interest::kRead, std::move(w), tag, role);
    return;
  }
  if (op == nullptr) {
    op = ring->start_receive(s.native_handle(), std::move(w), tag);  // the socket's reference
  } else {
    arm_waiter(op, std::move(w), tag);  // (a stolen task: op may be another ring's)
  }
  retain(op);
  op_ = op;
}

void ReceiveWait::stop() noexcept {
  poll_.cancel();
  if (op_ == nullptr) return;
  disarm_waiter(op_);
  release(op_);
  op_ = nullptr;
}

}  // namespace sg::io
