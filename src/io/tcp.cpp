#include "io/tcp.h"

#include <asio/basic_socket_acceptor.hpp>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "io/reactor.h"

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

}  // namespace

TcpStream::TcpStream(Socket s) : sock_(std::move(s)) {}

exec::Task<IoResult> TcpStream::read_some(std::span<char> buf, Deadline dl) {
  const int fd = sock_->native_handle();
  for (;;) {
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n >= 0) {
      co_await SpendBudget{};
      co_return IoResult{{}, static_cast<std::size_t>(n)};
    }
    int e = errno;
    if (e == EINTR) continue;
    if (!would_block(e)) co_return IoResult{{e, std::system_category()}, 0};
    if (std::error_code ec = co_await wait_ready(*sock_, asio::socket_base::wait_read, dl)) {
      co_return IoResult{ec, 0};
    }
  }
}

std::optional<IoResult> TcpStream::try_read(std::span<char> buf) {
  const int fd = sock_->native_handle();
  for (;;) {
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n >= 0) return IoResult{{}, static_cast<std::size_t>(n)};
    int e = errno;
    if (e == EINTR) continue;
    if (would_block(e)) return std::nullopt;
    return IoResult{{e, std::system_category()}, 0};
  }
}

exec::Task<std::error_code> TcpStream::write_all(std::span<const std::string_view> bufs, Deadline dl) {
  const int fd = sock_->native_handle();
  constexpr std::size_t kMaxIov = 64;
  std::size_t idx = 0;     // first buffer not fully written
  std::size_t offset = 0;  // bytes of bufs[idx] already written
  while (idx < bufs.size()) {
    iovec iov[kMaxIov];
    int cnt = 0;
    for (std::size_t i = idx; i < bufs.size() && cnt < static_cast<int>(kMaxIov); ++i) {
      std::string_view b = bufs[i];
      if (i == idx) b.remove_prefix(offset);
      if (b.empty()) continue;
      iov[cnt].iov_base = const_cast<char*>(b.data());
      iov[cnt].iov_len = b.size();
      ++cnt;
    }
    if (cnt == 0) break;
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(cnt);
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      int e = errno;
      if (e == EINTR) continue;
      if (!would_block(e)) co_return std::error_code{e, std::system_category()};
      if (std::error_code ec = co_await wait_ready(*sock_, asio::socket_base::wait_write, dl)) co_return ec;
      continue;
    }
    auto left = static_cast<std::size_t>(n);
    while (idx < bufs.size() && left > 0) {
      std::size_t avail = bufs[idx].size() - offset;
      if (left >= avail) {
        left -= avail;
        ++idx;
        offset = 0;
      } else {
        offset += left;
        left = 0;
      }
    }
    while (idx < bufs.size() && bufs[idx].size() == offset) {
      ++idx;
      offset = 0;
    }
    co_await SpendBudget{};
  }
  co_return std::error_code{};
}

exec::Task<std::error_code> TcpStream::write_all(std::string_view data, Deadline dl) {
  std::string_view one[1] = {data};
  co_return co_await write_all(std::span<const std::string_view>(one), dl);
}

TcpStream::PeerState TcpStream::peek() {
  char c;
  ssize_t n = ::recv(sock_->native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return PeerState::kData;
  if (n == 0) return PeerState::kClosed;
  if (would_block(errno) || errno == EINTR) return PeerState::kSilent;
  return PeerState::kClosed;  // reset or another error
}

void TcpStream::shutdown_write() {
  std::error_code ec;
  sock_->shutdown(asio::socket_base::shutdown_send, ec);
}

void TcpStream::close() {
  if (!sock_) return;
  std::error_code ec;
  sock_->close(ec);
}

tcp::endpoint TcpStream::remote_endpoint() const {
  if (peer_) return *peer_;
  std::error_code ec;
  return sock_->remote_endpoint(ec);
}

tcp::endpoint TcpStream::local_endpoint() const {
  std::error_code ec;
  return sock_->local_endpoint(ec);
}

exec::Task<Result<TcpStream>> TcpStream::connect(asio::io_context& ctx, tcp::endpoint ep, Deadline dl) {
  Socket s(ctx.get_executor());
  std::error_code ec;
  s.open(ep.protocol(), ec);
  if (ec) co_return ec;
  s.non_blocking(true, ec);
  s.set_option(tcp::no_delay(true), ec);
  int rc = ::connect(s.native_handle(), static_cast<const sockaddr*>(ep.data()),
                     static_cast<socklen_t>(ep.size()));
  if (rc != 0) {
    int e = errno;
    if (e != EINPROGRESS && e != EINTR) co_return std::error_code{e, std::system_category()};
    if (std::error_code w = co_await wait_ready(s, asio::socket_base::wait_write, dl)) co_return w;
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(s.native_handle(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) co_return errno_code();
    if (err != 0) co_return std::error_code{err, std::system_category()};
  }
  co_return TcpStream(std::move(s));
}

Result<TcpListener> TcpListener::bind(asio::io_context& ctx, tcp::endpoint ep, const ListenOptions& opts) {
  Acceptor a(ctx.get_executor());
  std::error_code ec;
  a.open(ep.protocol(), ec);
  if (ec) return ec;
  a.set_option(asio::socket_base::reuse_address(true), ec);
  if (opts.reuse_port) {
    int one = 1;
    if (::setsockopt(a.native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) return errno_code();
  }
  // Accepted sockets inherit TCP_NODELAY from the listener (Linux copies the listening
  // socket's state into each child): responses leave at once without a setsockopt per
  // connection.
  a.set_option(tcp::no_delay(true), ec);
  if (ec) return ec;
  a.bind(ep, ec);
  if (ec) return ec;
  a.listen(opts.backlog, ec);
  if (ec) return ec;
  a.non_blocking(true, ec);
  if (ec) return ec;
  return TcpListener(std::move(a));
}

Result<TcpListener> TcpListener::adopt(asio::io_context& ctx, int fd) {
  tcp::endpoint local;
  socklen_t len = static_cast<socklen_t>(local.capacity());
  if (::getsockname(fd, local.data(), &len) != 0) {
    std::error_code ec = errno_code();
    ::close(fd);
    return ec;
  }
  local.resize(len);
  Acceptor a(ctx.get_executor());
  std::error_code ec;
  a.assign(local.protocol(), fd, ec);
  if (ec) {
    ::close(fd);
    return ec;
  }
  a.set_option(tcp::no_delay(true), ec);
  if (!ec) a.non_blocking(true, ec);
  if (ec) return ec;  // `a` closes fd
  return TcpListener(std::move(a));
}

exec::Task<Result<TcpStream>> TcpListener::accept(Deadline dl) {
  for (;;) {
    // accept4 reports the peer's address, which also gives the family: no getsockname or
    // getpeername per connection.
    tcp::endpoint peer;
    socklen_t len = static_cast<socklen_t>(peer.capacity());
    int fd = ::accept4(acceptor_->native_handle(), peer.data(), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      Socket s(acceptor_->get_executor());
      std::error_code ec;
      peer.resize(len);
      s.assign(peer.protocol(), fd, ec);
      if (ec) {
        ::close(fd);
        co_return ec;
      }
      co_await SpendBudget{};
      TcpStream stream(std::move(s));
      stream.peer_ = peer;
      co_return stream;
    }
    int e = errno;
    if (e == EINTR || e == ECONNABORTED) continue;
    if (!would_block(e)) co_return std::error_code{e, std::system_category()};
    if (std::error_code ec = co_await wait_ready(*acceptor_, asio::socket_base::wait_read, dl)) co_return ec;
  }
}

tcp::endpoint TcpListener::local_endpoint() const {
  std::error_code ec;
  return acceptor_->local_endpoint(ec);
}

void TcpListener::close() {
  if (!acceptor_) return;
  std::error_code ec;
  acceptor_->close(ec);
}

}  // namespace sg::io
