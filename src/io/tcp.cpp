#include "io/tcp.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "io/uring.h"


namespace sg::io {

namespace {

std::error_code errno_code() { return {errno, std::system_category()}; }

// EWOULDBLOCK == EAGAIN on Linux; spelled once to keep -Wlogical-op quiet.
static_assert(EAGAIN == EWOULDBLOCK);
bool would_block(int e) { return e == EAGAIN; }

// A completed operation spends one unit of budget; an exhausted budget makes the task
// yield after completing it (Tokio's coop: the result is kept, the task goes to the back).
struct SpendBudget {
  bool await_ready() const noexcept { return exec::coop_proceed(); }
  void await_suspend(std::coroutine_handle<> h) const noexcept { exec::YieldAwaiter{true}.await_suspend(h); }
  void await_resume() const noexcept {}
};

// What a recvmsg's TCP_INQ control message says is left in the socket after it (a FIN
// alone counts 1), or -1 without one.
int bytes_left(msghdr& msg) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != IPPROTO_TCP || c->cmsg_type != TCP_CM_INQ) continue;
    int left;
    std::memcpy(&left, CMSG_DATA(c), sizeof(left));
    return left;
  }
  return -1;
}

// One non-blocking read: nullopt when it would block. On epoll a recvmsg, which also
// learns from TCP_INQ (set on epoll's sockets: new_socket) whether it left the socket
// empty, for the next readable wait (Socket::read_drained, io/reactor_fd.h).
std::optional<IoResult> recv_now(Socket& s, std::span<char> buf) {
  const int fd = s.native_handle();
  const bool track = s.reactor_handle() != nullptr;
  for (;;) {
    ssize_t n;
    int left = -1;
    if (track) {
      iovec iov{buf.data(), buf.size()};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      n = ::recvmsg(fd, &msg, 0);
      if (n > 0) left = bytes_left(msg);
    } else {
      n = ::recv(fd, buf.data(), buf.size(), 0);
    }
    if (n >= 0) {
      s.read_drained() = track && n > 0 && left == 0;
      return IoResult{{}, static_cast<std::size_t>(n)};
    }
    int e = errno;
    if (e == EINTR) continue;
    s.read_drained() = track && would_block(e);
    if (would_block(e)) return std::nullopt;
    return IoResult{{e, std::system_category()}, 0};
  }
}

}  // namespace

void push_window_update(int fd) {
  const int one = 1;
  // TCP_QUICKACK=1 sends an acknowledgement the kernel has scheduled but is delaying; a
  // failure (not TCP, closed) only leaves the kernel's own timing.
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
}

namespace {

// One operation on a ring, racing `deadline`: `start(ring, waker, tag)` starts it. Yields
// its result (bytes, or 0) or its error; errc::timed_out at the deadline, when it is
// cancelled (and how much of it happened is unknown). Dropped while it waits (the task is
// dropped), it cancels the operation, which owns whatever the kernel still reads.
template <class Start>
struct RingAwaiter {
  UringDriver& ring;
  Start start;
  Deadline deadline;
  exec::TimerEntry timer{};
  UringOp* op = nullptr;

  RingAwaiter(UringDriver& r, Start s, Deadline dl) : ring(r), start(std::move(s)), deadline(dl) {}
  RingAwaiter(const RingAwaiter&) = delete;
  RingAwaiter& operator=(const RingAwaiter&) = delete;
  ~RingAwaiter() { cancel_and_release(op); }

  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) {
    exec::Waker w = exec::arm_wait(h);
    if (deadline.is_set()) arm_deadline(timer, deadline, w.clone());
    op = start(ring, std::move(w), kTagReady);
  }
  IoResult await_resume() {
    const exec::WaitResult r = exec::last_wait_result();
    timer.cancel();
    UringOp* done = std::exchange(op, nullptr);
    if (r.value == kTagTimer) {
      cancel_and_release(done);
      return {r.code == 0 ? std::make_error_code(std::errc::timed_out) : r.ec(), 0};
    }
    const int res = done->res;  // published by the wake (the task's wait token)
    release(done);
    if (res < 0) return {{-res, std::system_category()}, 0};
    return {{}, static_cast<std::size_t>(res)};
  }
};

// io_uring: writes of fewer bytes are sends on the ring (batched: no syscall of their own);
// bigger ones, a body streaming, go straight to the socket with sendmsg (one syscall per
// 8+ KiB is a small share, and it saves the copy and a round trip through the ring: 64 KiB
// responses cost 50% more CPU as sends).
constexpr std::size_t kDirectSend = 8 * 1024;

std::size_t total_bytes(std::span<const std::string_view> bufs) {
  std::size_t n = 0;
  for (std::string_view b : bufs) n += b.size();
  return n;
}

// Where a gathered write stands: bufs[idx], from `offset` on, holds the first unsent byte.
// Kept out of the writing coroutines' frames along with the iovec array below (a
// coroutine frame holds every local for the whole write).
struct SendCursor {
  std::span<const std::string_view> bufs;
  std::size_t idx = 0;
  std::size_t offset = 0;

  bool done() {
    while (idx < bufs.size() && bufs[idx].size() == offset) {
      ++idx;
      offset = 0;
    }
    return idx == bufs.size();
  }
  // After `n` more bytes went out.
  void advance(std::size_t n) {
    while (n > 0) {
      const std::size_t k = std::min(n, bufs[idx].size() - offset);
      n -= k;
      offset += k;
      if (offset == bufs[idx].size()) {
        ++idx;
        offset = 0;
      }
    }
  }
};

// One sendmsg of what is left (at most 64 buffers of it): the bytes sent, or -1 and errno.
ssize_t send_some(int fd, const SendCursor& c) {
  constexpr std::size_t kMaxIov = 64;
  iovec iov[kMaxIov];
  std::size_t cnt = 0;
  for (std::size_t i = c.idx; i < c.bufs.size() && cnt < kMaxIov; ++i) {
    std::string_view b = c.bufs[i];
    if (i == c.idx) b.remove_prefix(c.offset);
    if (b.empty()) continue;
    iov[cnt].iov_base = const_cast<char*>(b.data());
    iov[cnt].iov_len = b.size();
    ++cnt;
  }
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = cnt;
  return ::sendmsg(fd, &msg, MSG_NOSIGNAL);
}

// Whether reads on `s` go through receives on the current worker's ring.
bool uses_receives(Socket& s) {
  if (s.receive_op() != nullptr) return true;
  if (s.reactor_handle() != nullptr) return false;
  UringDriver* ring = current_ring();
  return ring != nullptr && ring->receives();
}

}  // namespace

std::optional<IoResult> TcpStream::take_received(std::span<char> buf) {
  UringOp*& op = sock_.receive_op();
  if (op == nullptr || !op->completed.load(std::memory_order_acquire)) return std::nullopt;
  if (op->res == -ENOBUFS) {
    // The ring had no free buffer: the bytes are still in the socket.
    release(std::exchange(op, nullptr));
    return recv_now(sock_, buf);
  }
  // An error or EOF stays (every later read sees it again, as recv would); bytes are
  // copied out until none are left, then the receive (and its buffer) goes.
  if (op->res < 0) return IoResult{{-op->res, std::system_category()}, 0};
  std::span<const char> got = received_bytes(op);
  if (got.empty()) return IoResult{{}, 0};
  const std::size_t n = std::min(got.size(), buf.size());
  std::memcpy(buf.data(), got.data(), n);
  op->taken += static_cast<uint32_t>(n);
  if (n == got.size()) {
    sock_.streaming() = op->res == static_cast<int>(UringDriver::kReceiveBufferSize);
    release(std::exchange(op, nullptr));
  }
  return IoResult{{}, n};
}

exec::Task<IoResult> TcpStream::read_some(std::span<char> buf, Deadline dl, ReadMode mode) {
  if (uses_receives(sock_)) {
    for (;;) {
      std::optional<IoResult> got = take_received(buf);
      if (!got && sock_.streaming() && sock_.receive_op() == nullptr) {
        // A body streams: what follows is most likely there already, and one recv costs
        // less than a receive's round trip through the ring (two task polls).
        got = recv_now(sock_, buf);
        sock_.streaming() = got && !got->ec && got->n == buf.size();
      }
      if (got) {
        co_await SpendBudget{};
        co_return *got;
      }
      if (mode == ReadMode::kRestOfMessage) push_window_update(sock_.native_handle());
      EitherReadable w = co_await wait_readable(nullptr, dl);
      if (w.ec) co_return IoResult{w.ec, 0};
    }
  }
  for (;;) {
    if (std::optional<IoResult> got = recv_now(sock_, buf)) {
      co_await SpendBudget{};
      co_return *got;
    }
    if (mode == ReadMode::kRestOfMessage) push_window_update(sock_.native_handle());
    if (std::error_code ec = co_await wait_ready(sock_, Interest::kRead, dl)) co_return IoResult{ec, 0};
  }
}

std::optional<IoResult> TcpStream::try_read(std::span<char> buf) {
  // A receive that is still running gets the next bytes: a recv now could reorder them.
  if (sock_.receive_op() != nullptr) return take_received(buf);
  return recv_now(sock_, buf);
}

exec::Task<std::error_code> TcpStream::write_all(std::span<const std::string_view> bufs, Deadline dl,
                                                 WriteMode mode) {
  if (sock_.send_pending()) {
    if (std::error_code ec = co_await flush(dl)) co_return ec;  // one send at a time: in order
  }
  const int fd = sock_.native_handle();
  UringDriver* ring =
      mode == WriteMode::kMayQueue && sock_.reactor_handle() == nullptr && fd >= 0 ? current_ring() : nullptr;
  if (const std::size_t n = total_bytes(bufs); ring != nullptr && n < kDirectSend) {
    if (n > 0) ring->start_background_send(fd, bufs, dl.at, sock_.send_slot());  // (io/uring.h)
    co_return std::error_code{};
  }
  SendCursor c{bufs};
  while (!c.done()) {
    const ssize_t n = send_some(fd, c);
    if (n < 0) {
      const int e = errno;
      if (e == EINTR) continue;
      if (!would_block(e)) co_return std::error_code{e, std::system_category()};
      if (std::error_code ec = co_await wait_ready(sock_, Interest::kWrite, dl)) co_return ec;
      continue;
    }
    c.advance(static_cast<std::size_t>(n));
    co_await SpendBudget{};
  }
  co_return std::error_code{};
}

exec::Task<std::error_code> TcpStream::write_all(std::string_view data, Deadline dl) {
  std::string_view one[1] = {data};
  co_return co_await write_all(std::span<const std::string_view>(one), dl);
}

TcpStream::PeerState TcpStream::peek() {
  if (UringOp* op = sock_.receive_op()) {
    // What the receive took is no longer in the socket. One still running may have taken
    // bytes whose completion is not reaped yet: "data", the answer that keeps the
    // connection from being reused (upstream pool) and from being taken for gone.
    if (!op->completed.load(std::memory_order_acquire)) return PeerState::kData;
    if (op->res > 0) return PeerState::kData;
    if (op->res != -ENOBUFS) return PeerState::kClosed;
  }
  char c;
  ssize_t n = ::recv(sock_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return PeerState::kData;
  if (n == 0) return PeerState::kClosed;
  if (would_block(errno) || errno == EINTR) return PeerState::kSilent;
  return PeerState::kClosed;  // reset or another error
}

std::optional<IoResult> TcpStream::peek_some(std::span<char> buf) {
  if (UringOp* op = sock_.receive_op()) {
    if (!op->completed.load(std::memory_order_acquire)) return std::nullopt;  // still running
    if (op->res == -ENOBUFS) {
      release(std::exchange(sock_.receive_op(), nullptr));  // the bytes are still in the socket
    } else {
      if (op->res < 0) return IoResult{{-op->res, std::system_category()}, 0};
      std::span<const char> got = received_bytes(op);  // empty at EOF
      const std::size_t n = std::min(got.size(), buf.size());
      std::memcpy(buf.data(), got.data(), n);
      return IoResult{{}, n};
    }
  }
  for (;;) {
    const ssize_t n = ::recv(sock_.native_handle(), buf.data(), buf.size(), MSG_PEEK | MSG_DONTWAIT);
    if (n >= 0) return IoResult{{}, static_cast<std::size_t>(n)};
    if (errno == EINTR) continue;
    if (would_block(errno)) return std::nullopt;
    return IoResult{{errno, std::system_category()}, 0};
  }
}

bool TcpStream::woke_with_input() {
  UringOp*& op = sock_.receive_op();
  if (op == nullptr || !op->completed.load(std::memory_order_acquire) || op->res != -ENOBUFS) return true;
  if (peek() != PeerState::kSilent) return true;  // bytes (read with a plain recv), or a close
  release(std::exchange(op, nullptr));
  return false;
}

TcpStream::FlushAwaiter::~FlushAwaiter() {
  timer.cancel();
  if (op == nullptr) return;
  // Dropped while it waited: the send goes on, the socket's again (its close settles it).
  if (armed) disarm_waiter(op);
  sock.restore_send(op);
}

bool TcpStream::FlushAwaiter::await_ready() noexcept {
  // Taken out of the socket while we look at it and wait for it: the ring cannot settle
  // it (io/uring.h) under us. None there: the last send went out whole.
  op = sock.take_send();
  return op == nullptr || op->completed.load(std::memory_order_acquire);
}

void TcpStream::FlushAwaiter::await_suspend(std::coroutine_handle<> h) {
  exec::Waker w = exec::arm_wait(h);
  if (deadline.is_set()) arm_deadline(timer, deadline, w.clone());
  armed = true;
  arm_waiter(op, std::move(w), kTagReady);  // (wakes at once if it completed meanwhile)
}

std::error_code TcpStream::FlushAwaiter::await_resume() {
  UringOp* const send = std::exchange(op, nullptr);
  if (send == nullptr) return {};
  if (armed) {
    const exec::WaitResult r = exec::last_wait_result();
    timer.cancel();
    disarm_waiter(send);
    if (r.value == kTagTimer) {
      // Given up: the connection cannot be written in order any more.
      abandon_send(send);
      return r.code == 0 ? std::make_error_code(std::errc::timed_out) : r.ec();
    }
  }
  const std::error_code ec = background_send_result(send);
  release(send);
  return ec;
}

bool TcpStream::writes_done() {
  // (Once per pooled upstream request: most often the ring has already freed the send.)
  if (!sock_.send_pending()) return true;
  UringOp* op = sock_.take_send();
  if (op == nullptr) return true;
  if (op->completed.load(std::memory_order_acquire) && !background_send_result(op)) {
    release(op);
    return true;
  }
  sock_.restore_send(op);  // still being sent, or failed (the next write reports it)
  return false;
}

exec::Task<void> TcpStream::shutdown_write(Deadline dl) {
  (void)co_await flush(dl);
  if (sock_.is_open()) ::shutdown(sock_.native_handle(), SHUT_WR);
}

void TcpStream::close(std::string_view tail) { sock_.close(tail); }

tcp::endpoint TcpStream::local_endpoint() const { return sock_.local_endpoint(); }

namespace {

// A new non-blocking TCP socket for `family` with TCP_NODELAY on, registered on `io`.
// On epoll, reads report what they leave in the socket (TCP_INQ; recv_now), and a
// listener's accepted sockets inherit it. Refused (a kernel before 4.18): readable waits
// then look before they sleep, as they would on a socket whose read left bytes.
void report_bytes_left(IoContext io, int fd) {
  const int one = 1;
  if (io.reactor != nullptr) (void)::setsockopt(fd, IPPROTO_TCP, TCP_INQ, &one, sizeof(one));
}

Result<Socket> new_socket(IoContext io, int family) {
  int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno_code();
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    std::error_code ec = errno_code();
    ::close(fd);
    return ec;
  }
  report_bytes_left(io, fd);
  return Socket::adopt(io, fd);
}

int family_of(const tcp::endpoint& ep) { return ep.protocol().family(); }

}  // namespace

exec::Task<Result<TcpStream>> TcpStream::connect(IoContext io, tcp::endpoint ep, Deadline dl) {
  auto s = new_socket(io, family_of(ep));
  if (!s.ok()) co_return s.error();
  if (UringDriver* ring = io.reactor == nullptr ? current_ring() : nullptr) {
    // A connect on the ring: the kernel waits for the handshake and reports its result.
    const int fd = s->native_handle();
    auto start = [fd, &ep](UringDriver& d, exec::Waker w, std::size_t tag) {
      return d.start_connect(fd, static_cast<const sockaddr*>(ep.data()), static_cast<socklen_t>(ep.size()),
                             std::move(w), tag);
    };
    IoResult r = co_await RingAwaiter(*ring, start, dl);
    if (r.ec) co_return r.ec;
    co_return TcpStream(std::move(*s));
  }
  int rc = ::connect(s->native_handle(), static_cast<const sockaddr*>(ep.data()), static_cast<socklen_t>(ep.size()));
  if (rc != 0) {
    int e = errno;
    if (e != EINPROGRESS && e != EINTR) co_return std::error_code{e, std::system_category()};
    if (std::error_code w = co_await wait_ready(*s, Interest::kWrite, dl)) co_return w;
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(s->native_handle(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) co_return errno_code();
    if (err != 0) co_return std::error_code{err, std::system_category()};
  }
  co_return TcpStream(std::move(*s));
}

Result<TcpListener> TcpListener::bind(IoContext io, tcp::endpoint ep, const ListenOptions& opts) {
  // Accepted sockets inherit TCP_NODELAY from the listener (Linux copies the listening
  // socket's state into each child): responses leave at once without a setsockopt per
  // connection.
  auto s = new_socket(io, family_of(ep));
  if (!s.ok()) return s.error();
  const int fd = s->native_handle();
  int one = 1;
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) return errno_code();
  // A socket with SO_REUSEPORT binds beside any other of the same user that has it; set
  // after the bind, the bind has checked the address is free, and listen() still puts the
  // socket in a group that the siblings bound next can join.
  auto reuse_port = [&] { return ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) == 0; };
  if (opts.reuse_port && !opts.exclusive_address && !reuse_port()) return errno_code();
  if (::bind(fd, static_cast<const sockaddr*>(ep.data()), static_cast<socklen_t>(ep.size())) != 0) return errno_code();
  if (opts.reuse_port && opts.exclusive_address && !reuse_port()) return errno_code();
  if (::listen(fd, opts.backlog) != 0) return errno_code();
  return TcpListener(std::move(*s), io);
}

Result<TcpListener> TcpListener::adopt(IoContext io, int fd) {
  int one = 1;
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 ||
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    std::error_code ec = errno_code();
    ::close(fd);
    return ec;
  }
  report_bytes_left(io, fd);
  return TcpListener(Socket::adopt(io, fd), io);
}

Result<TcpListener> TcpListener::share() {
  const int fd = ::fcntl(sock_.native_handle(), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return errno_code();
  shared_ = true;
  return TcpListener(Socket::adopt(io_, fd), io_, true);
}

namespace {

// A kernel that refuses multishot accepts (before 5.19: EINVAL) is told once; listeners
// then wait for readability, as on epoll.
std::atomic<bool> ring_accepts_refused{false};

bool ring_accept_error_is_transient(int e) { return e == ECANCELED || e == ECONNABORTED || e == EINTR; }

// Waits for the multishot accept `op` to queue a connection or end, or for the deadline:
// a dropped or timed-out wait only disarms it (what it accepts stays queued).
struct AcceptsAwaiter {
  UringOp* op;
  Deadline deadline;
  exec::TimerEntry timer{};
  bool armed = false;

  AcceptsAwaiter(UringOp* o, Deadline dl) : op(o), deadline(dl) {}
  AcceptsAwaiter(const AcceptsAwaiter&) = delete;
  AcceptsAwaiter& operator=(const AcceptsAwaiter&) = delete;
  ~AcceptsAwaiter() { stop(); }

  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) {
    exec::Waker w = exec::arm_wait(h);
    if (deadline.is_set()) arm_deadline(timer, deadline, w.clone());
    retain(op);  // the listener may close while we wait
    armed = true;
    arm_waiter(op, std::move(w), kTagReady);
  }
  std::error_code await_resume() {
    const exec::WaitResult r = exec::last_wait_result();
    stop();
    if (r.value == kTagTimer && r.code == 0) return std::make_error_code(std::errc::timed_out);
    return r.ec();
  }
  void stop() noexcept {
    timer.cancel();
    if (!std::exchange(armed, false)) return;
    disarm_waiter(op);
    release(op);
  }
};

// The peer's address as an accept on the ring reported it (single-shot accepts), if it did.
std::optional<tcp::endpoint> reported_peer(const Accepted& a) {
  tcp::endpoint ep;
  if (a.peer_len == 0 || a.peer_len > ep.capacity()) return std::nullopt;
  std::memcpy(ep.data(), a.peer, a.peer_len);
  ep.resize(a.peer_len);
  return ep;
}

}  // namespace

Result<std::optional<TcpStream>> TcpListener::adopt_accepted(int fd, tcp::endpoint* peer, const tcp::endpoint* from) {
  tcp::endpoint asked;
  if (peer != nullptr && from == nullptr) {
    socklen_t len = static_cast<socklen_t>(asked.capacity());
    if (::getpeername(fd, asked.data(), &len) != 0) {
      ::close(fd);  // reset before we looked (ENOTCONN): nobody to serve
      return std::optional<TcpStream>();
    }
    asked.resize(len);
    from = &asked;
  }
  if (peer != nullptr) *peer = *from;
  return std::optional<TcpStream>(TcpStream(Socket::adopt(io_, fd)));
}

Result<std::optional<TcpStream>> TcpListener::try_accept(tcp::endpoint* peer) {
  if (UringOp*& op = sock_.receive_op(); op != nullptr) {
    const Accepted a = take_accepted(op);
    if (a.fd >= 0) {
      const std::optional<tcp::endpoint> from = reported_peer(a);
      return adopt_accepted(a.fd, peer, from ? &*from : nullptr);
    }
    if (!a.ended) return std::optional<TcpStream>();
    release(std::exchange(op, nullptr));
    // A single-shot accept that ended with its connection taken: no accept4 here, which
    // would find the queue empty mostly; the next wait's accept takes a queued connection
    // at once.
    if (shared_ && a.error == 0) return std::optional<TcpStream>();
    if (a.error == -EINVAL) {
      ring_accepts_refused.store(true, std::memory_order_relaxed);
    } else if (a.error != 0 && !ring_accept_error_is_transient(-a.error)) {
      return std::error_code{-a.error, std::system_category()};  // EMFILE and the like
    }
    // Ended: what queued in the kernel since is taken below, and the next wait starts
    // another.
  }
  for (;;) {
    // accept4 reports the peer's address, which also gives the family: no getsockname or
    // getpeername per connection.
    tcp::endpoint from;
    socklen_t len = static_cast<socklen_t>(from.capacity());
    int fd = ::accept4(sock_.native_handle(), from.data(), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    sock_.read_drained() = false;  // (an accept may leave more queued)
    if (fd >= 0) {
      from.resize(len);
      return adopt_accepted(fd, peer, &from);
    }
    int e = errno;
    if (e == EINTR || e == ECONNABORTED) continue;
    if (would_block(e)) {
      sock_.read_drained() = true;  // for epoll's next readable wait (io/reactor_fd.h)
      return std::optional<TcpStream>();
    }
    return std::error_code{e, std::system_category()};
  }
}

exec::Task<std::error_code> TcpListener::wait_acceptable(Deadline dl) {
  if (UringOp* op = sock_.receive_op(); op != nullptr) {
    // Switching to taking connections one by one: the ring stops taking them.
    stop_accepts(op);
    co_return co_await AcceptsAwaiter(op, dl);
  }
  co_return co_await wait_ready(sock_, Interest::kRead, dl);
}

exec::Task<std::error_code> TcpListener::wait_accepted(Deadline dl) {
  UringOp*& op = sock_.receive_op();
  UringDriver* ring = sock_.reactor_handle() == nullptr ? current_ring() : nullptr;
  if (op == nullptr && (ring == nullptr || !sock_.is_open() || ring_accepts_refused.load(std::memory_order_relaxed))) {
    co_return co_await wait_ready(sock_, Interest::kRead, dl);
  }
  if (op == nullptr) op = ring->start_accepts(sock_.native_handle(), !shared_);  // the socket's reference
  co_return co_await AcceptsAwaiter(op, dl);
}

exec::Task<Result<TcpStream>> TcpListener::accept(Deadline dl, tcp::endpoint* peer) {
  // The budget is spent before a connection is taken, not after: a task dropped at this
  // yield holds no connection.
  co_await SpendBudget{};
  for (;;) {
    auto got = try_accept(peer);
    if (!got.ok()) co_return got.error();
    if (got->has_value()) co_return std::move(**got);
    if (std::error_code ec = co_await wait_accepted(dl)) co_return ec;
  }
}

exec::Task<std::vector<TcpListener::TakenConnection>> TcpListener::stop_accepting() {
  std::vector<TakenConnection> out;
  UringOp*& op = sock_.receive_op();
  if (op == nullptr) co_return out;
  stop_accepts(op);
  for (;;) {
    const Accepted a = take_accepted(op);
    if (a.ended) break;
    if (a.fd < 0) {
      co_await AcceptsAwaiter(op, {});
      continue;
    }
    tcp::endpoint peer;
    const std::optional<tcp::endpoint> from = reported_peer(a);
    auto got = adopt_accepted(a.fd, &peer, from ? &*from : nullptr);
    if (got.ok() && got->has_value()) out.push_back({std::move(**got), peer});
  }
  release(std::exchange(op, nullptr));
  take_backlog(out);
  co_return out;
}

void TcpListener::take_backlog(std::vector<TakenConnection>& out) {
  // The ring's accept waits on the socket as an exclusive waiter: a connection's arrival
  // wakes it and no other waiter on the socket (another process's ring, after a binary
  // upgrade hands the socket on). A cancel that lands after that wake and before the
  // accept ran eats the wake: the connection stays queued, and the other waiter hears of
  // it only when the next connection arrives (measured: two connections queued 10 s on a
  // handed-over socket under load). So what the kernel queued until the cancel is taken
  // here; what arrives later wakes the waiters that remain. (Only after a ring's accept:
  // epoll's waits and the ring's polls, which backlog mode uses, are not exclusive, and
  // backlog mode leaves its queue to whoever accepts next.) Bounded by a full default
  // backlog (net.core.somaxconn), in case connections keep arriving as fast as taken.
  constexpr int kMaxTaken = 4096;
  for (int taken = 0; taken < kMaxTaken; ++taken) {
    tcp::endpoint peer;
    auto got = try_accept(&peer);
    if (!got.ok() || !got->has_value()) return;
    out.push_back({std::move(**got), peer});
  }
}

}  // namespace sg::io
