#include "io/uring.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <thread>

#include "exec/alloc.h"
#include "exec/context.h"

namespace sg::io {

namespace {

// user_data of the completions that are not operations. Operations are heap pointers,
// never this small.
constexpr uint64_t kWakeTag = 1;    // the eventfd read
constexpr uint64_t kCancelTag = 2;  // an ASYNC_CANCEL's own completion
// Ring sizes: submissions are flushed every tick, so a few hundred slots suffice; the
// completion queue holds one entry per waiting socket that turns ready at once (the kernel
// keeps any excess, IORING_FEAT_NODROP, until there is room).
constexpr unsigned kCqEntries = 16384;
constexpr uint32_t kReapWhenFull = 64;

thread_local UringDriver* tl_ring = nullptr;

UringOp* new_op() {
  void* p = exec::task_alloc(sizeof(UringOp));
  return new (p) UringOp();
}

void unref(UringOp* op) noexcept {
  // acq_rel: the last owner sees every write the other made before dropping its reference.
  if (op->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  op->~UringOp();
  exec::task_free(op, sizeof(UringOp));
}

std::error_code errno_code(int e) { return {e, std::system_category()}; }

}  // namespace

Result<std::unique_ptr<UringDriver>> UringDriver::create(unsigned entries) {
  std::unique_ptr<UringDriver> d(new UringDriver());
  io_uring_params p{};
  p.cq_entries = kCqEntries;
  // COOP_TASKRUN: completions are posted when this worker next enters the kernel instead
  // of interrupting it; the worker enters at every flush and park anyway, and TASKRUN_FLAG
  // tells a busy worker's poll when completions wait for such an entry.
  p.flags = IORING_SETUP_CQSIZE | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
  int rc = io_uring_queue_init_params(entries, &d->ring_, &p);
  if (rc == -EINVAL) {  // a kernel before 5.19: neither TASKRUN flag
    p = io_uring_params{};
    p.cq_entries = kCqEntries;
    p.flags = IORING_SETUP_CQSIZE;
    rc = io_uring_queue_init_params(entries, &d->ring_, &p);
  }
  if (rc < 0) return errno_code(-rc);
  d->ring_ready_ = true;
  d->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (d->wake_fd_ < 0) return errno_code(errno);
  d->arm_wake_read();
  return d;
}

bool UringDriver::available(std::string& why) {
  // On a thread of its own: the kernel registers a ring's creator with it, and the ring's
  // asynchronous teardown later sends that task work (TWA_SIGNAL), which would interrupt
  // a blocking syscall of the caller's thread with EINTR.
  int rc = 0;
  std::thread([&rc] {
    io_uring ring;
    rc = io_uring_queue_init(4, &ring, 0);
    if (rc == 0) io_uring_queue_exit(&ring);
  }).join();
  if (rc < 0) {
    why = std::string("io_uring_setup failed: ") + std::strerror(-rc);
    return false;
  }
  return true;
}

UringDriver::~UringDriver() {
  shutdown();
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (ring_ready_) io_uring_queue_exit(&ring_);
}

void UringDriver::attach() { tl_ring = this; }
void UringDriver::detach() { tl_ring = nullptr; }

bool UringDriver::on_ring_thread() const { return tl_ring == this; }

io_uring_sqe* UringDriver::sqe() {
  io_uring_sqe* e;
  while ((e = io_uring_get_sqe(&ring_)) == nullptr) {
    // The submission queue is full: hand it to the kernel now. It refuses (EBUSY) while
    // completions it could not post wait for room: reap some (their tasks are woken as
    // from a park) and try again.
    int rc = io_uring_submit(&ring_);
    if (rc == -EBUSY || rc == -EAGAIN) {
      io_uring_get_events(&ring_);  // moves completions the kernel holds back into the queue
      reap(kReapWhenFull);
    }
  }
  return e;
}

void UringDriver::arm_wake_read() {
  io_uring_sqe* e = sqe();
  io_uring_prep_read(e, wake_fd_, &wake_buf_, sizeof(wake_buf_), 0);
  io_uring_sqe_set_data64(e, kWakeTag);
}

UringOp* UringDriver::start_poll(int fd, uint32_t events, exec::Waker w, std::size_t tag) {
  UringOp* op = new_op();
  op->waker = std::move(w);
  op->tag = tag;
  op->ring = this;
  in_flight_.fetch_add(1, std::memory_order_relaxed);
  io_uring_sqe* e = sqe();
  io_uring_prep_poll_add(e, fd, events);
  io_uring_sqe_set_data(e, op);
  return op;
}

void UringDriver::submit_cancel(UringOp* op) {
  io_uring_sqe* e = sqe();
  io_uring_prep_cancel(e, op, 0);
  io_uring_sqe_set_data64(e, kCancelTag);
}

void UringDriver::queue_remote_cancel(UringOp* op) {
  op->refs.fetch_add(1, std::memory_order_relaxed);  // the queue's, until the ring takes it
  remote_cancels_total_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard lk(remote_mu_);
    remote_cancels_.push_back(op);
  }
  has_remote_.store(true, std::memory_order_release);
  unpark();
}

void UringDriver::drain_remote_cancels() {
  if (!has_remote_.load(std::memory_order_acquire)) return;
  std::vector<UringOp*> todo;
  {
    std::lock_guard lk(remote_mu_);
    todo.swap(remote_cancels_);
    has_remote_.store(false, std::memory_order_relaxed);
  }
  for (UringOp* op : todo) {
    if (!op->completed.load(std::memory_order_acquire)) submit_cancel(op);
    unref(op);
  }
}

void cancel_and_release(UringOp* op) noexcept {
  if (op == nullptr) return;
  if (!op->completed.load(std::memory_order_acquire)) {
    UringDriver* ring = op->ring;
    if (ring->on_ring_thread()) {
      ring->cancels_.fetch_add(1, std::memory_order_relaxed);
      ring->submit_cancel(op);
    } else {
      ring->queue_remote_cancel(op);
    }
  }
  unref(op);
}

void UringDriver::complete(UringOp* op, int res) {
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  exec::Waker w = std::move(op->waker);
  op->completed.store(true, std::memory_order_release);
  std::error_code ec;
  if (res == -ECANCELED) ec = std::make_error_code(std::errc::operation_canceled);
  else if (res < 0) ec = errno_code(-res);
  // A poll that reports POLLERR/POLLHUP is still "ready": the read or write that follows
  // gets the socket's error.
  std::move(w).wake({ec, op->tag}, exec::ScheduleKind::kDriver);
  unref(op);
}

uint32_t UringDriver::reap(uint32_t max_events) {
  uint32_t n = 0;
  io_uring_cqe* cqe = nullptr;
  while (n < max_events && io_uring_peek_cqe(&ring_, &cqe) == 0) {
    const uint64_t data = io_uring_cqe_get_data64(cqe);
    const int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    if (data == kWakeTag) {
      wake_pending_.store(false, std::memory_order_release);
      if (!shut_down_) arm_wake_read();
    } else if (data != kCancelTag) {
      complete(reinterpret_cast<UringOp*>(static_cast<uintptr_t>(data)), res);
      ++n;
    }
  }
  return n;
}

void UringDriver::flush() {
  if (io_uring_sq_ready(&ring_) != 0) io_uring_submit(&ring_);
}

uint32_t UringDriver::poll(uint32_t max_events) {
  drain_remote_cancels();
  // Entering the kernel also posts completions whose task work is pending (TASKRUN_FLAG).
  if (io_uring_sq_ready(&ring_) != 0 || (IO_URING_READ_ONCE(*ring_.sq.kflags) & IORING_SQ_TASKRUN) != 0) {
    io_uring_submit_and_get_events(&ring_);
  }
  return reap(max_events);
}

uint32_t UringDriver::park(uint32_t max_events, std::optional<std::chrono::milliseconds> timeout) {
  drain_remote_cancels();
  if (io_uring_cq_ready(&ring_) != 0) {
    if (io_uring_sq_ready(&ring_) != 0) io_uring_submit(&ring_);  // e.g. the cancels just queued
  } else {
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec ts{};
    if (timeout) {
      ts.tv_sec = timeout->count() / 1000;
      ts.tv_nsec = (timeout->count() % 1000) * 1'000'000;
    }
    // One io_uring_enter: submits what is queued and sleeps until a completion (an
    // operation, the eventfd read of an unpark) or the timeout.
    int rc = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, timeout ? &ts : nullptr, nullptr);
    (void)rc;  // -ETIME (timeout) and -EINTR are ordinary; completions are reaped below
  }
  return reap(max_events);
}

void UringDriver::unpark() {
  if (wake_pending_.exchange(true, std::memory_order_acq_rel)) return;
  uint64_t one = 1;
  ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  (void)n;  // EAGAIN only when the counter is saturated: a wake-up is pending anyway
}

void UringDriver::shutdown() {
  if (!ring_ready_ || shut_down_) return;
  shut_down_ = true;
  // Not on the caller's thread: a thread that submits to a ring is registered with it,
  // and the ring's teardown later interrupts that thread's blocking syscalls (EINTR).
  std::thread([this] { cancel_everything(); }).join();
}

void UringDriver::cancel_everything() {
  // Every operation still in flight is cancelled and its final completion reaped: its
  // wait completes as cancelled, which drops its task (the executor has shut down).
  // Completions can queue more cancels (a dropped task's other waits): loop until none.
  io_uring_sqe* e = sqe();
  io_uring_prep_cancel(e, nullptr, IORING_ASYNC_CANCEL_ANY);
  io_uring_sqe_set_data64(e, kCancelTag);
  while (in_flight_.load(std::memory_order_relaxed) != 0) {
    drain_remote_cancels();
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec ts{0, 100'000'000};
    io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
    reap(UINT32_MAX);
    if (in_flight_.load(std::memory_order_relaxed) != 0) {
      e = sqe();
      io_uring_prep_cancel(e, nullptr, IORING_ASYNC_CANCEL_ANY);
      io_uring_sqe_set_data64(e, kCancelTag);
    }
  }
  drain_remote_cancels();
}

UringDriver* current_ring() noexcept { return tl_ring; }

}  // namespace sg::io
