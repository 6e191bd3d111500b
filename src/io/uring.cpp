#include "io/uring.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <thread>

#include "exec/alloc.h"
#include "exec/context.h"
#include "io/uring_send.h"

namespace sg::io {

using uring_send::background;
using uring_send::BackgroundSend;
using uring_send::kLingerCheck;
using uring_send::leave_slot_locked;

namespace {

using uring_send::kCancelTag;
using uring_send::kWakeTag;

// Ring sizes: submissions are flushed every tick, so a few hundred slots suffice; the
// completion queue holds one entry per waiting socket that turns ready at once (the kernel
// keeps any excess, IORING_FEAT_NODROP, until there is room).
constexpr unsigned kCqEntries = 16384;
constexpr uint32_t kReapWhenFull = 64;
constexpr int kBufferGroup = 0;

thread_local UringDriver* tl_ring = nullptr;

// What follows a multishot accept: the descriptors its completions brought that the
// listener has not taken yet (fds[head..]), under the operation's lock. A vector that
// only ever grows to the largest burst the ring accepted between two takes.
// A single-shot accept also has the peer's address, which the kernel writes here as it
// completes (0 peer_len: a multishot accept, which reports none).
struct AcceptQueue {
  std::vector<int> fds;
  std::size_t head = 0;
  bool cancel_sent = false;
  socklen_t peer_len = 0;
  sockaddr_storage peer{};
};

AcceptQueue& accept_queue(UringOp* op) { return *reinterpret_cast<AcceptQueue*>(op + 1); }

UringOp* new_op(std::size_t extra = 0) {
  void* p = exec::task_alloc(sizeof(UringOp) + extra);
  auto* op = new (p) UringOp();
  op->extra = static_cast<uint32_t>(extra);
  return op;
}

}  // namespace

void retain(UringOp* op) noexcept { op->refs.fetch_add(1, std::memory_order_relaxed); }

void release(UringOp* op) noexcept {
  // acq_rel: the last owner sees every write the other made before dropping its reference
  // (a receive's result and buffer, written by the ring's thread).
  if (op->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (op->buffer >= 0) op->ring->recycle(op->buffer);
  if (op->accepts) {
    // Connections accepted that nobody took (the listener closed): closed, not leaked.
    AcceptQueue& q = accept_queue(op);
    for (std::size_t i = q.head; i < q.fds.size(); ++i) ::close(q.fds[i]);
    q.~AcceptQueue();
  }
  if (op->background) background(op).~BackgroundSend();
  const std::size_t bytes = sizeof(UringOp) + op->extra;
  op->~UringOp();
  exec::task_free(op, bytes);
}

namespace {

std::error_code errno_code(int e) { return {e, std::system_category()}; }

// Whether io_uring_register may be called (a harmless one: the opcode probe).
bool can_register(io_uring& ring) {
  io_uring_probe* probe = io_uring_get_probe_ring(&ring);
  if (probe == nullptr) return false;
  io_uring_free_probe(probe);
  return true;
}

}  // namespace

Result<std::unique_ptr<UringDriver>> UringDriver::create(unsigned entries) {
  std::unique_ptr<UringDriver> d(new UringDriver());
  // DEFER_TASKRUN: completions are posted only when this worker enters the kernel to
  // collect them (its driver polls and parks), in one batch, instead of at whatever
  // syscall it makes next (COOP_TASKRUN: every recv, getpeername and eventfd write then ran
  // pending task work on its way out). Measured: close 0.92-0.93x CPU per request, small
  // 0.91-0.97x (tests/bench/proxy_ab.sh). It needs SINGLE_ISSUER: only one thread may
  // submit, the worker, which enables the ring (created disabled here) in attach().
  // TASKRUN_FLAG tells a busy worker's poll when completions wait for such an entry.
  constexpr unsigned kModes[] = {
      IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED | IORING_SETUP_TASKRUN_FLAG,
      IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG,  // a kernel before 6.1
      0,                                                      // before 5.19
  };
  int rc = -EINVAL;
  for (unsigned mode : kModes) {
    io_uring_params p{};
    p.cq_entries = kCqEntries;
    p.flags = IORING_SETUP_CQSIZE | mode;
    rc = io_uring_queue_init_params(entries, &d->ring_, &p);
    if (rc == -EINVAL) continue;
    d->single_issuer_ = (mode & IORING_SETUP_SINGLE_ISSUER) != 0;
    if (rc == 0 && d->single_issuer_ && !can_register(d->ring_)) {
      // A syscall filter that allows io_uring_setup and io_uring_enter but not
      // io_uring_register: the worker could not enable this ring. The next mode needs no
      // register call (receives then wait with polls: no provided buffers either).
      io_uring_queue_exit(&d->ring_);
      d->ring_ = io_uring{};
      continue;
    }
    break;
  }
  if (rc < 0) return errno_code(-rc);
  d->ring_ready_ = true;
  d->setup_buffers();  // (a disabled ring takes registrations from any thread)
  d->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (d->wake_fd_ < 0) return errno_code(errno);
  d->arm_wake_read();  // (queued; the worker's first submit sends it)
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
  if (buf_ring_ != nullptr) ::munmap(buf_ring_, kReceiveBuffers * sizeof(io_uring_buf));
  if (buffers_ != nullptr) ::munmap(buffers_, std::size_t{kReceiveBuffers} * kReceiveBufferSize);
}

void UringDriver::setup_buffers() {
  // The buffer ring is memory shared with the kernel: page-aligned, registered by hand
  // (Debian's liburing 2.3 predates io_uring_setup_buf_ring). The buffers are mapped, not
  // allocated: a page costs memory only once a receive has used it. A kernel without
  // buffer rings (before 5.19) leaves receives() false: reads then wait with polls.
  const std::size_t ring_bytes = kReceiveBuffers * sizeof(io_uring_buf);
  void* ring_mem = ::mmap(nullptr, ring_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ring_mem == MAP_FAILED) return;
  void* bufs = ::mmap(nullptr, std::size_t{kReceiveBuffers} * kReceiveBufferSize, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (bufs == MAP_FAILED) {
    ::munmap(ring_mem, ring_bytes);
    return;
  }
  // Left out of core dumps: they hold what clients and upstreams last sent (credentials,
  // bodies), up to the whole mapping, and a dump is for the gateway's own state. The flag
  // also keeps the kernel from merging the mapping with a neighbouring task slab, so its
  // pages stay one mapping in /proc/PID/smaps (VmFlags "dd"), where tests tell them apart.
  ::madvise(bufs, std::size_t{kReceiveBuffers} * kReceiveBufferSize, MADV_DONTDUMP);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<uintptr_t>(ring_mem);
  reg.ring_entries = kReceiveBuffers;
  reg.bgid = kBufferGroup;
  if (io_uring_register_buf_ring(&ring_, &reg, 0) != 0) {
    ::munmap(ring_mem, ring_bytes);
    ::munmap(bufs, std::size_t{kReceiveBuffers} * kReceiveBufferSize);
    return;
  }
  buf_ring_ = static_cast<io_uring_buf_ring*>(ring_mem);
  buffers_ = static_cast<char*>(bufs);
  io_uring_buf_ring_init(buf_ring_);
  provide_new_buffers(kInitialReceiveBuffers);
}

void UringDriver::provide_new_buffers(unsigned count) {
  const unsigned first = static_cast<unsigned>(buffers_provided_.load(std::memory_order_relaxed));
  count = std::min(count, kReceiveBuffers - first);
  if (count == 0) return;
  const int mask = io_uring_buf_ring_mask(kReceiveBuffers);
  for (unsigned i = 0; i < count; ++i) {
    const unsigned id = first + i;
    io_uring_buf_ring_add(buf_ring_, buffers_ + std::size_t{id} * kReceiveBufferSize, kReceiveBufferSize,
                          static_cast<unsigned short>(id), mask, static_cast<int>(i));
  }
  // Release: the kernel sees the entries before the tail that publishes them.
  io_uring_buf_ring_advance(buf_ring_, static_cast<int>(count));
  buffers_provided_.store(first + count, std::memory_order_relaxed);
}

void UringDriver::count_receive(bool found_no_buffer) {
  ++window_receives_;
  if (found_no_buffer) {
    buffer_shortages_.fetch_add(1, std::memory_order_relaxed);
    ++window_shortages_;
    // Both conditions: the shortages are frequent, and every buffer the ring has holds
    // bytes (not some on their way back from another thread; and the other shortages of
    // a burst, reaped after the first growth, find buffers free and grow it no further).
    const std::size_t provided = buffers_provided_.load(std::memory_order_relaxed);
    if (window_shortages_ >= kGrowAfterShortages && window_shortages_ * kShortageRate >= window_receives_ &&
        buffers_in_use_.load(std::memory_order_relaxed) >= provided) {
      // (The clock only here: at most once per kGrowAfterShortages receives.)
      const auto now = std::chrono::steady_clock::now();
      if (shortages_since_ == std::chrono::steady_clock::time_point{} || now - last_shortage_ > kGrowInterval) {
        shortages_since_ = now;  // a streak starts
      }
      last_shortage_ = now;
      if (now - shortages_since_ >= kGrowInterval) {
        // Load, not a burst: double. The next doubling needs a streak as long.
        provide_new_buffers(static_cast<unsigned>(provided));
        shortages_since_ = now;
      }
      window_receives_ = window_shortages_ = 0;
      return;
    }
  }
  if (window_receives_ >= kShortageWindow) window_receives_ = window_shortages_ = 0;
}

void UringDriver::recycle(int buffer) {
  buffers_in_use_.fetch_sub(1, std::memory_order_relaxed);
  if (!on_ring_thread()) {
    // Only the ring's thread writes the buffer ring: the buffer waits in a queue it
    // drains at its next poll or park (no unpark needed: until then it takes no receives).
    {
      std::lock_guard lk(remote_mu_);
      remote_recycles_.push_back(buffer);
    }
    has_remote_.store(true, std::memory_order_release);
    return;
  }
  // The ring's tail is published with a release store (io_uring_buf_ring_advance): the
  // kernel sees the entry before it may hand the buffer out again.
  io_uring_buf_ring_add(buf_ring_, buffers_ + std::size_t(buffer) * kReceiveBufferSize, kReceiveBufferSize,
                        static_cast<unsigned short>(buffer), io_uring_buf_ring_mask(kReceiveBuffers), 0);
  io_uring_buf_ring_advance(buf_ring_, 1);
}

void UringDriver::attach() {
  tl_ring = this;
  if (issuer_ != std::thread::id{}) return;
  issuer_ = std::this_thread::get_id();
  if (!single_issuer_) return;
  // The enabling thread becomes the ring's only issuer. Liburing 2.3 declares
  // io_uring_enable_rings but does not export it: the register call by hand.
  if (::syscall(__NR_io_uring_register, ring_.ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0) < 0) {
    // Only a ring that is not disabled (never, see create) fails here; a worker whose ring
    // takes no submissions would hang its connections.
    std::fprintf(stderr, "stealgate: io_uring: cannot enable a worker's ring: %s\n", std::strerror(errno));
    std::abort();
  }
}
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

UringOp* UringDriver::new_waited_op(std::size_t extra, exec::Waker w, std::size_t tag) {
  UringOp* op = new_op(extra);
  op->waker = std::move(w);
  op->tag = tag;
  op->ring = this;
  in_flight_.fetch_add(1, std::memory_order_relaxed);
  return op;
}

UringOp* UringDriver::start_poll(int fd, uint32_t events, exec::Waker w, std::size_t tag) {
  UringOp* op = new_waited_op(0, std::move(w), tag);
  io_uring_sqe* e = sqe();
  io_uring_prep_poll_add(e, fd, events);
  io_uring_sqe_set_data(e, op);
  return op;
}

UringOp* UringDriver::start_receive(int fd, exec::Waker w, std::size_t tag) {
  UringOp* op = new_waited_op(0, std::move(w), tag);
  op->receive = true;
  io_uring_sqe* e = sqe();
  io_uring_prep_recv(e, fd, nullptr, kReceiveBufferSize, 0);
  e->ioprio |= IORING_RECVSEND_POLL_FIRST;  // arm the poll first: no bytes are there yet (uring.h)
  e->flags |= IOSQE_BUFFER_SELECT;
  e->buf_group = kBufferGroup;
  io_uring_sqe_set_data(e, op);
  return op;
}

UringOp* UringDriver::start_connect(int fd, const sockaddr* addr, socklen_t len, exec::Waker w, std::size_t tag) {
  UringOp* op = new_waited_op(len, std::move(w), tag);
  auto* copy = reinterpret_cast<sockaddr*>(op + 1);
  std::memcpy(copy, addr, len);
  io_uring_sqe* e = sqe();
  io_uring_prep_connect(e, fd, copy, len);
  io_uring_sqe_set_data(e, op);
  return op;
}

UringOp* UringDriver::start_accepts(int fd, bool multishot) {
  UringOp* op = new_waited_op(sizeof(AcceptQueue), {}, 0);
  op->accepts = true;
  new (op + 1) AcceptQueue{};
  io_uring_sqe* e = sqe();
  // A multishot accept takes no address: one buffer would be shared by every accept of
  // the operation (the caller asks getpeername instead). A single-shot one has its own.
  if (multishot) {
    io_uring_prep_multishot_accept(e, fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  } else {
    AcceptQueue& q = accept_queue(op);
    q.peer_len = sizeof q.peer;
    io_uring_prep_accept(e, fd, reinterpret_cast<sockaddr*>(&q.peer), &q.peer_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
  }
  io_uring_sqe_set_data(e, op);
  return op;
}

Accepted take_accepted(UringOp* op) noexcept {
  std::lock_guard lk(op->lock);
  AcceptQueue& q = accept_queue(op);
  if (q.head < q.fds.size()) {
    const int fd = q.fds[q.head++];
    if (q.head == q.fds.size()) {
      q.fds.clear();
      q.head = 0;
    }
    // (The address is read under the lock that the completion took after the kernel wrote
    // it; a multishot accept's peer_len stays 0: none reported.)
    return {fd, false, 0, reinterpret_cast<const sockaddr*>(&q.peer), q.peer_len};
  }
  // Relaxed: `completed` and `res` are written under the lock held here.
  if (op->completed.load(std::memory_order_relaxed)) return {-1, true, op->res};
  return {};
}

void stop_accepts(UringOp* op) noexcept {
  {
    std::lock_guard lk(op->lock);
    AcceptQueue& q = accept_queue(op);
    if (q.cancel_sent || op->completed.load(std::memory_order_relaxed)) return;
    q.cancel_sent = true;
  }
  op->ring->cancel(op);
}

void arm_waiter(UringOp* op, exec::Waker w, std::size_t tag) noexcept {
  {
    std::lock_guard lk(op->lock);
    // Relaxed: `completed` and an accept's queue are written under the lock held here.
    const bool has_result = op->completed.load(std::memory_order_relaxed) ||
                            (op->accepts && accept_queue(op).head < accept_queue(op).fds.size());
    if (!has_result) {
      op->waker = std::move(w);
      op->tag = tag;
      return;
    }
  }
  std::move(w).wake({std::error_code{}, tag}, exec::ScheduleKind::kDriver);  // already there
}

void disarm_waiter(UringOp* op) noexcept {
  exec::Waker stale;
  std::lock_guard lk(op->lock);
  stale = std::move(op->waker);  // its task reference is dropped after the unlock
}

std::span<const char> received_bytes(const UringOp* op) noexcept {
  if (op->buffer < 0 || op->res <= 0) return {};
  const char* p = op->ring->buffers_ + std::size_t(op->buffer) * UringDriver::kReceiveBufferSize;
  return {p + op->taken, static_cast<std::size_t>(op->res) - op->taken};
}

void UringDriver::submit_cancel(UringOp* op) {
  io_uring_sqe* e = sqe();
  io_uring_prep_cancel(e, op, 0);
  io_uring_sqe_set_data64(e, kCancelTag);
}

void UringDriver::submit_close(int fd) {
  io_uring_sqe* e = sqe();
  io_uring_prep_close(e, fd);
  io_uring_sqe_set_data64(e, kCancelTag);  // (its result is of no use: the socket is gone)
}

bool UringDriver::close_later(int fd) {
  if (shut_down_.load(std::memory_order_relaxed)) return false;
  submit_close(fd);
  return true;
}

void UringDriver::queue_remote_cancel(UringOp* op, int fd) {
  if (shut_down_.load(std::memory_order_acquire)) {
    // The ring submits nothing any more: no queued submission can name fd.
    if (fd >= 0) ::close(fd);
    return;
  }
  op->refs.fetch_add(1, std::memory_order_relaxed);  // the queue's, until the ring takes it
  remote_cancels_total_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard lk(remote_mu_);
    remote_cancels_.push_back({op, fd, nullptr, {}});
  }
  has_remote_.store(true, std::memory_order_release);
  unpark();
}

void UringDriver::drain_remote() {
  if (!has_remote_.load(std::memory_order_acquire)) return;
  std::vector<RemoteCancel>& todo = draining_cancels_;
  std::vector<int>& buffers = draining_recycles_;
  {
    std::lock_guard lk(remote_mu_);
    todo.swap(remote_cancels_);
    buffers.swap(remote_recycles_);
    has_remote_.store(false, std::memory_order_relaxed);
  }
  if (!buffers.empty()) {
    const int mask = io_uring_buf_ring_mask(kReceiveBuffers);
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      io_uring_buf_ring_add(buf_ring_, buffers_ + std::size_t(buffers[i]) * kReceiveBufferSize, kReceiveBufferSize,
                            static_cast<unsigned short>(buffers[i]), mask, static_cast<int>(i));
    }
    io_uring_buf_ring_advance(buf_ring_, static_cast<int>(buffers.size()));
  }
  for (RemoteCancel& c : todo) {
    if (c.linger_send != nullptr) {
      linger(c.linger_send, c.op, std::move(c.tail));
      continue;
    }
    if (!c.op->completed.load(std::memory_order_acquire)) {
      submit_cancel(c.op);
      if (c.fd >= 0) submit_close(c.fd);
    } else if (c.fd >= 0) {
      ::close(c.fd);
    }
    release(c.op);  // may recycle a buffer: this is the ring's thread
  }
  todo.clear();
  buffers.clear();
}

void UringDriver::cancel(UringOp* op) {
  if (on_ring_thread()) {
    cancels_.fetch_add(1, std::memory_order_relaxed);
    submit_cancel(op);
  } else {
    queue_remote_cancel(op, -1);
  }
}

void cancel_and_release(UringOp* op) noexcept {
  if (op == nullptr) return;
  if (!op->completed.load(std::memory_order_acquire)) op->ring->cancel(op);
  release(op);
}

void cancel_and_close(UringOp* op, int fd) noexcept {
  UringDriver* ring = op->ring;
  if (op->completed.load(std::memory_order_acquire)) {
    ::close(fd);  // its submission has long reached the kernel
  } else if (ring->on_ring_thread()) {
    ring->cancels_.fetch_add(1, std::memory_order_relaxed);
    ring->submit_cancel(op);
    ring->submit_close(fd);
  } else {
    ring->queue_remote_cancel(op, fd);
  }
  release(op);
}

void UringDriver::complete_accept(UringOp* op, int res, uint32_t flags) {
  // Every completion but the last (IORING_CQE_F_MORE) carries a descriptor; the last may
  // carry one too, or the error that ended it (a cancel: ECANCELED; EMFILE; EINVAL from a
  // kernel without multishot accepts, before 5.19).
  const bool last = (flags & IORING_CQE_F_MORE) == 0;
  exec::Waker w;
  std::size_t tag;
  bool full = false;
  {
    std::lock_guard lk(op->lock);
    AcceptQueue& q = accept_queue(op);
    if (res >= 0) q.fds.push_back(res);
    // A listener that does not keep up (its task starved, or stopped at a connection
    // limit) leaves the rest in the kernel's backlog, which is bounded, instead of
    // descriptors piling up here: the ring stops taking them. The next accept takes
    // what is queued, then from the kernel, and starts another.
    if (!last && !q.cancel_sent && q.fds.size() - q.head >= kMaxAcceptsQueued) full = q.cancel_sent = true;
    w = std::move(op->waker);
    tag = op->tag;
    if (last) {
      op->res = res < 0 ? res : 0;
      op->completed.store(true, std::memory_order_release);
    }
  }
  if (full) cancel(op);
  // The wake only says "look": the descriptor or the end is read from the operation.
  if (w) std::move(w).wake({std::error_code{}, tag}, exec::ScheduleKind::kDriver);
  if (last) {
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    release(op);
  }
}

void UringDriver::complete(UringOp* op, int res, uint32_t flags) {
  if (op->accepts) {
    complete_accept(op, res, flags);
    return;
  }
  if (op->background && resend_rest(op, res)) return;  // (sets op->res when final)
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  if (!op->background) op->res = res;
  if ((flags & IORING_CQE_F_BUFFER) != 0) {
    op->buffer = static_cast<int>(flags >> IORING_CQE_BUFFER_SHIFT);
    buffers_in_use_.fetch_add(1, std::memory_order_relaxed);
  }
  if (op->receive && res != -ECANCELED) count_receive(res == -ENOBUFS);
  exec::Waker w;
  std::size_t tag;
  bool left_slot = false;
  {
    std::lock_guard lk(op->lock);
    w = std::move(op->waker);
    tag = op->tag;
    if (op->background) left_slot = leave_slot_locked(op);
    // Release: whoever sees `completed` (acquire) sees res and buffer.
    op->completed.store(true, std::memory_order_release);
  }
  if (left_slot) release(op);  // the socket's reference
  // A receive's result, error included, is read from the operation by the task; its wake
  // only says "done" (a cancelled one: its socket was closed, or the runtime stops). A
  // poll that reports POLLERR/POLLHUP is still "ready": the read or write that follows
  // gets the socket's error.
  std::error_code ec;
  if (res == -ECANCELED) ec = std::make_error_code(std::errc::operation_canceled);
  else if (res < 0 && !op->receive) ec = errno_code(-res);
  if (w) std::move(w).wake({ec, tag}, exec::ScheduleKind::kDriver);
  if (op->background && background(op).lingering) finish_lingering(op);
  release(op);
}

uint32_t UringDriver::reap(uint32_t max_events) {
  uint32_t n = 0;
  io_uring_cqe* cqe = nullptr;
  while (n < max_events && io_uring_peek_cqe(&ring_, &cqe) == 0) {
    const uint64_t data = io_uring_cqe_get_data64(cqe);
    const int res = cqe->res;
    const uint32_t flags = cqe->flags;
    io_uring_cqe_seen(&ring_, cqe);
    if (data == kWakeTag) {
      wake_pending_.store(false, std::memory_order_release);
      if (!shut_down_.load(std::memory_order_relaxed)) arm_wake_read();
    } else if (data != kCancelTag) {
      complete(reinterpret_cast<UringOp*>(static_cast<uintptr_t>(data)), res, flags);
      ++n;
    }
  }
  return n;
}

bool UringDriver::flush() {
  // With GETEVENTS (waiting for none): under DEFER_TASKRUN the kernel runs a linked
  // operation (the close behind a connection's last send, chain_fin) as task work, and
  // only such an entry runs it, so the FIN leaves with this submit, not at the next poll.
  // It is also the cheaper entry: with a plain submit here, tests/bench/proxy_ab.sh (4
  // rounds) measured 1.12x CPU per request and 0.90x req/s in small GETs, 1.14x and 0.90x
  // with a new connection per request.
  if (io_uring_sq_ready(&ring_) != 0) io_uring_submit_and_get_events(&ring_);
  hand_over_lingering();
  // Ready: CQEs posted, or task work the next entry posts. The flag can also be left set
  // with no work behind it (a completion that queues task work sets it after adding its
  // item, and the worker's entry in between may already have run that item and cleared
  // the flag), until the ring's next completion; the worker's visit then dispatches
  // nothing and it parks (exec/worker.cpp), where a wait for one completion sleeps.
  return io_uring_cq_ready(&ring_) != 0 || task_work_pending();
}

uint32_t UringDriver::poll(uint32_t max_events) {
  drain_remote();
  sweep_lingering();
  // Entering the kernel also posts completions whose task work is pending.
  if (io_uring_sq_ready(&ring_) != 0 || task_work_pending()) io_uring_submit_and_get_events(&ring_);
  hand_over_lingering();
  return reap(max_events);
}

uint32_t UringDriver::park(uint32_t max_events, std::optional<std::chrono::milliseconds> timeout) {
  drain_remote();
  sweep_lingering();
  if (!handing_over_.empty()) {  // (not after the sleep: their sockets would wait for it)
    io_uring_submit(&ring_);
    hand_over_lingering();
  }
  if (!lingering_.empty() && (!timeout || *timeout > kLingerCheck)) timeout = kLingerCheck;
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
  if (!ring_ready_ || shut_down_.load(std::memory_order_relaxed)) return;
  shut_down_.store(true, std::memory_order_release);
  // On the ring's own thread, in either mode: under SINGLE_ISSUER no other thread may
  // submit or wait, and the runtime shuts a worker's ring down on the worker's thread
  // (exec::Scheduler::shutdown), which then exits (a thread that submitted to a ring has
  // its blocking syscalls interrupted by the ring's teardown). A ring never attached has
  // submitted nothing.
  if (issuer_ == std::thread::id{}) return;
  if (issuer_ != std::this_thread::get_id()) {
    std::fprintf(stderr, "stealgate: io_uring: a ring shut down off its thread: its operations are not cancelled\n");
    return;
  }
  cancel_everything();
}

void UringDriver::cancel_everything() {
  // Every operation still in flight is cancelled and its final completion reaped: its
  // wait completes as cancelled, which drops its task (the executor has shut down).
  // Completions can queue more cancels (a dropped task's other waits): loop until none.
  // Lingering sends get a moment first: a response written just before the stop still
  // reaches a client that reads it. (The workers have stopped: lingering_ is ours now.)
  const auto linger_until = std::chrono::steady_clock::now() + kShutdownLinger;
  while (!lingering_.empty() && std::chrono::steady_clock::now() < linger_until) {
    drain_remote();
    sweep_lingering();
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec ts{0, 10'000'000};
    io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
    hand_over_lingering();
    reap(UINT32_MAX);
  }
  io_uring_sqe* e = sqe();
  io_uring_prep_cancel(e, nullptr, IORING_ASYNC_CANCEL_ANY);
  io_uring_sqe_set_data64(e, kCancelTag);
  while (in_flight_.load(std::memory_order_relaxed) != 0) {
    drain_remote();
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
  drain_remote();
  for (UringOp* op : lingering_) release(op);  // all completed: their descriptors are closed
  lingering_.clear();
  if (io_uring_sq_ready(&ring_) != 0) io_uring_submit(&ring_);  // the closes it queued
  hand_over_lingering();
}

UringDriver* current_ring() noexcept { return tl_ring; }

}  // namespace sg::io
