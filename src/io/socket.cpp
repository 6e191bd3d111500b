#include "io/socket.h"

#include <sys/socket.h>
#include <unistd.h>

#include <utility>

#include "io/uring.h"

namespace sg::io {

namespace {

char* put_decimal(char* p, unsigned v) {
  char digits[5];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n > 0) *p++ = digits[--n];
  return p;
}

}  // namespace

std::size_t write_endpoint_v4_text(const tcp::endpoint& ep, char (&out)[kEndpointV4TextMax]) {
  const asio::ip::address addr = ep.address();
  if (!addr.is_v4()) return 0;
  char* p = out;
  const asio::ip::address_v4::bytes_type b = addr.to_v4().to_bytes();
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (i != 0) *p++ = '.';
    p = put_decimal(p, b[i]);
  }
  *p++ = ':';
  p = put_decimal(p, ep.port());
  return static_cast<std::size_t>(p - out);
}

std::string endpoint_text(const tcp::endpoint& ep) {
  char v4[kEndpointV4TextMax];
  if (std::size_t n = write_endpoint_v4_text(ep, v4); n != 0) return std::string(v4, n);
  return "[" + ep.address().to_string() + "]:" + std::to_string(ep.port());
}

Socket Socket::adopt(IoContext io, int fd) {
  Socket s;
  if (io.reactor != nullptr) s.desc_ = std::make_unique<ReactorFd>(*io.reactor, fd);
  s.fd_ = fd;
  return s;
}

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    desc_ = std::move(o.desc_);
    recv_ = o.recv_;
    streaming_ = o.streaming_;
    read_drained_ = o.read_drained_;
    o.fd_ = -1;
    o.desc_.reset();
    o.recv_ = nullptr;
    adopt_send(o);
  }
  return *this;
}

void Socket::adopt_send(Socket& o) noexcept {
  if (UringOp* op = o.take_send()) move_send(op, &send_);
}

void Socket::close(std::string_view tail) {
  if (UringOp* send = take_send()) {
    if (!send->completed.load(std::memory_order_acquire)) {
      disown_send(send);  // (this socket's slot is about to go)
      if (fd_ >= 0) {
        linger_close(send, tail);
        return;
      }
    }
    release(send);  // settled: it went out whole, or failed (which a close need not know)
  }
  if (!tail.empty() && fd_ >= 0) (void)::send(fd_, tail.data(), tail.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (recv_ != nullptr) {
    // io_uring, with a receive: the ring cancels it, then closes the descriptor.
    if (fd_ >= 0) cancel_and_close(std::exchange(recv_, nullptr), fd_);
    else cancel_and_release(std::exchange(recv_, nullptr));
    fd_ = -1;
    return;
  }
  if (fd_ < 0) return;
  if (desc_) {
    desc_.reset();  // deregisters, aborts its waits
    ::close(fd_);
  } else if (UringDriver* ring = current_ring(); ring == nullptr || !ring->close_later(fd_)) {
    ::close(fd_);  // (off the workers, or the ring has stopped)
  }
  fd_ = -1;
}

void Socket::linger_close(UringOp* send, std::string_view tail) {
  UringOp* recv = std::exchange(recv_, nullptr);
  if (recv != nullptr && recv->completed.load(std::memory_order_acquire)) {
    release(recv);  // (its submission is long done: it names fd no more)
    recv = nullptr;
  }
  close_after_send(send, recv, std::string(tail));
  fd_ = -1;
}

tcp::endpoint Socket::local_endpoint() const {
  tcp::endpoint ep;
  socklen_t len = static_cast<socklen_t>(ep.capacity());
  if (fd_ < 0 || ::getsockname(fd_, ep.data(), &len) != 0) return {};
  ep.resize(len);
  return ep;
}

}  // namespace sg::io
