// Background sends on the ring and the lingering close after one (io/uring.h, "Sends"):
// starting one, resending the rest of a short send, handing a lingering send to its
// socket's ring, and closing the descriptor once the send is done or past its deadline.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "io/uring.h"
#include "io/uring_send.h"

namespace sg::io {

using uring_send::background;
using uring_send::background_bytes;
using uring_send::BackgroundSend;
using uring_send::kCancelTag;

namespace {

// A write without a deadline lingers this long at most once its socket is closed.
constexpr auto kMaxLinger = std::chrono::seconds(60);
// An EAGAIN completion (io-wq under memory pressure) is resent this many times at most.
constexpr uint32_t kMaxEagainResends = 8;

int64_t steady_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

void UringDriver::start_background_send(int fd, std::span<const std::string_view> bufs,
                                        std::chrono::steady_clock::time_point deadline,
                                        std::atomic<UringOp*>& slot) {
  std::size_t n = 0;
  for (std::string_view b : bufs) n += b.size();
  n = std::min(n, kMaxSend);
  UringOp* op = new_waited_op(sizeof(BackgroundSend) + n + uring_send::kTailRoom, {}, 0);
  op->background = true;
  auto* b = new (op + 1) BackgroundSend();
  b->fd = fd;
  b->size = static_cast<uint32_t>(n);
  b->owner = &slot;
  // (A write nearly always has a deadline: no clock read per send for the cap.)
  const bool capped = deadline == std::chrono::steady_clock::time_point::max();
  b->deadline_ns = steady_ns(capped ? std::chrono::steady_clock::now() + kMaxLinger : deadline);
  char* data = background_bytes(op);
  for (std::size_t i = 0, at = 0; at < n; ++i) {
    const std::size_t k = std::min(bufs[i].size(), n - at);
    std::memcpy(data + at, bufs[i].data(), k);
    at += k;
  }
  io_uring_sqe* e = sqe();
  // MSG_WAITALL: the kernel retries a partial send itself (the ring resends what it
  // still leaves, resend_rest).
  io_uring_prep_send(e, fd, data, n, MSG_NOSIGNAL | MSG_WAITALL);
  io_uring_sqe_set_data(e, op);
  // (Its completion is reaped by this thread, after this store.)
  slot.store(op, std::memory_order_release);
}

std::error_code background_send_result(const UringOp* op) noexcept {
  if (op->res < 0) return {-op->res, std::system_category()};
  if (static_cast<uint32_t>(op->res) != background(op).size) return std::make_error_code(std::errc::broken_pipe);
  return {};
}

void abandon_send(UringOp* op) noexcept {
  {
    std::lock_guard lk(op->lock);
    op->abandoned = true;  // a short completion from now on is final
    background(op).owner = nullptr;
  }
  cancel_and_release(op);
}

void disown_send(UringOp* op) noexcept {
  std::lock_guard lk(op->lock);
  background(op).owner = nullptr;
}

void move_send(UringOp* op, std::atomic<UringOp*>* slot) noexcept {
  // Under the lock: a completion that read the old slot has finished with it (its
  // compare-exchange there failed: the slot was empty once we took the send out).
  std::lock_guard lk(op->lock);
  background(op).owner = slot;
  slot->store(op, std::memory_order_release);
}

bool uring_send::leave_slot_locked(UringOp* op) noexcept {
  BackgroundSend& b = background(op);
  if (b.owner == nullptr || op->res != static_cast<int>(b.size)) return false;
  UringOp* expected = op;
  if (!b.owner->compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel, std::memory_order_relaxed)) {
    return false;
  }
  b.owner = nullptr;
  return true;
}


bool UringDriver::resend_rest(UringOp* op, int res) {
  BackgroundSend& b = background(op);
  if (res > 0) b.sent += static_cast<uint32_t>(res);
  const bool again = (res > 0 && b.sent < b.size) || (res == -EAGAIN && ++b.eagain_resends <= kMaxEagainResends);
  bool abandoned;
  {
    std::lock_guard lk(op->lock);
    abandoned = op->abandoned;
  }
  // An abandon after this check (from another thread: on this one it cannot come
  // between) queues its cancel to this ring, which submits it after the resubmission and
  // so finds it: a cancel names the operation, not one submission of it.
  if (again && !abandoned) {
    b.fin_chained = false;  // the chain stopped at this completion: its links were cancelled
    io_uring_sqe* e = sqe();
    io_uring_prep_send(e, b.fd, background_bytes(op) + b.sent, b.size - b.sent, MSG_NOSIGNAL | MSG_WAITALL);
    io_uring_sqe_set_data(e, op);
    return true;
  }
  // Final: the bytes sent (short: failed), or the error.
  op->res = res < 0 ? res : static_cast<int>(b.sent);
  return false;
}

void close_after_send(UringOp* send, UringOp* recv, std::string tail) noexcept {
  // The receive's ring first, when there is one: its cancel must reach the kernel before
  // anything closes the descriptor.
  UringDriver* ring = recv != nullptr ? recv->ring : send->ring;
  if (ring->on_ring_thread()) ring->linger(send, recv, std::move(tail));
  else ring->queue_remote_linger(send, recv, std::move(tail));
}

void UringDriver::linger(UringOp* send, UringOp* recv, std::string tail) {
  if (send->ring == this && !send->completed.load(std::memory_order_acquire) && chain_fin(send, tail)) {
    tail.clear();  // (sent with the bytes)
  }
  if (recv != nullptr) {
    if (!recv->completed.load(std::memory_order_acquire)) {
      cancels_.fetch_add(1, std::memory_order_relaxed);
      submit_cancel(recv);
    }
    release(recv);
  }
  if (send->ring != this) {
    handing_over_.push_back({send, std::move(tail)});  // after our next submit
    return;
  }
  BackgroundSend& b = background(send);
  if (!tail.empty()) b.tail = std::move(tail);
  b.lingering = true;
  if (send->completed.load(std::memory_order_acquire)) {
    finish_lingering(send);  // (it completed since the socket looked)
    release(send);
    return;
  }
  lingering_.push_back(send);  // with the socket's reference
}

bool UringDriver::chain_fin(UringOp* send, std::string_view tail) {
  io_uring_sq& sq = ring_.sq;
  // Not submitted yet (a submit moves sqe_head up to sqe_tail), the last one queued, and
  // room for the link: a full queue would submit the send alone, its link open.
  if (sq.sqe_tail == sq.sqe_head || io_uring_sq_space_left(&ring_) < 1) return false;
  io_uring_sqe* last = &sq.sqes[(sq.sqe_tail - 1) & sq.ring_mask];
  BackgroundSend& b = background(send);
  if (last->user_data != reinterpret_cast<uintptr_t>(send) || tail.size() > uring_send::kTailRoom) return false;
  // The tail (a TLS close_notify) joins the send's bytes: the links hold no memory.
  std::memcpy(background_bytes(send) + b.size, tail.data(), tail.size());
  b.size += static_cast<uint32_t>(tail.size());
  last->len = b.size - b.sent;
  // A send that fails or stops short (MSG_WAITALL) cancels the link, and its completion
  // closes fd as before. One that went out whole is followed by the close at once: the
  // FIN, unless something else still holds the socket (a receive whose cancel follows
  // in this batch). Not a shutdown: io_uring always runs that on an io-wq thread (a
  // thread wake-up per connection; 1.12x CPU per request with a new connection each).
  // The descriptor is closed in the chain, before anything could reuse its number, so
  // the send's completion must not close it.
  // The FIN leaves as that entry ends, after every send of its batch, not right behind
  // its own bytes: 143 us p50 after the data in the close scenario (wrk -c64, tcpdump),
  // and the client closed first on 16-21% of connections (HAProxy: 9 us, none). Sending
  // with sendmsg and then shutdown(SHUT_WR) took that to 9 us, and no client closed
  // first; but wrk's CPU per request stayed the same (52-56 us), and ours rose from
  // 35-40 to 48-57 us (4 alternating rounds). So the FIN's timing is not worth the
  // syscalls.
  last->flags |= IOSQE_IO_LINK;
  io_uring_sqe* e = sqe();
  io_uring_prep_close(e, b.fd);
  io_uring_sqe_set_data64(e, kCancelTag);
  b.fin_chained = true;
  return true;
}

void UringDriver::queue_remote_linger(UringOp* send, UringOp* recv, std::string tail) {
  if (shut_down_.load(std::memory_order_acquire)) {
    // Every operation has completed (cancel_everything): nothing can name fd any more.
    ::close(background(send).fd);
    if (recv != nullptr) release(recv);
    release(send);
    return;
  }
  {
    std::lock_guard lk(remote_mu_);
    remote_cancels_.push_back({recv, -1, send, std::move(tail)});
  }
  has_remote_.store(true, std::memory_order_release);
  unpark();
}

void UringDriver::hand_over_lingering() {
  if (handing_over_.empty()) return;
  for (HandOver& h : handing_over_) {
    UringDriver* ring = h.send->ring;
    ring->queue_remote_linger(h.send, nullptr, std::move(h.tail));
  }
  handing_over_.clear();
}

void UringDriver::finish_lingering(UringOp* op) {
  BackgroundSend& b = background(op);
  if (b.fd < 0) return;
  if (b.fin_chained && op->res == static_cast<int>(b.size)) {
    b.fd = -1;  // the chain's close has it (chain_fin)
    return;
  }
  if (!b.tail.empty() && op->res == static_cast<int>(b.size)) {
    (void)::send(b.fd, b.tail.data(), b.tail.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  // A submission: the receive's cancel, queued before, reaches the kernel first.
  if (!close_later(b.fd)) ::close(b.fd);
  b.fd = -1;
}

void UringDriver::sweep_lingering() {
  if (lingering_.empty()) return;
  const int64_t now = steady_ns(std::chrono::steady_clock::now());
  for (std::size_t i = 0; i < lingering_.size();) {
    UringOp* op = lingering_[i];
    if (op->completed.load(std::memory_order_acquire)) {  // finish_lingering has run
      release(op);
      lingering_[i] = lingering_.back();
      lingering_.pop_back();
      continue;
    }
    BackgroundSend& b = background(op);
    if (!b.cancel_sent && now >= b.deadline_ns) {
      b.cancel_sent = true;
      {
        std::lock_guard lk(op->lock);
        op->abandoned = true;
      }
      cancels_.fetch_add(1, std::memory_order_relaxed);
      submit_cancel(op);  // its completion (ECANCELED, or what it sent) closes fd
    }
    ++i;
  }
}

}  // namespace sg::io
