// A socket descriptor on the runtime's I/O driver, and where sockets are created.
//
// On the epoll driver (Asio's reactor) a socket is registered with the reactor once, at
// its first wait (one epoll_ctl), and readiness waits are reactor operations of our own
// (io/reactor_fd.h). On io_uring it is a plain descriptor: nothing is registered, and a
// wait is a poll operation on the ring of the worker that waits (io/uring.h). On io_uring a
// stream's readable wait is a receive whose bytes the socket keeps until a read takes them
// (receive_op(); io/tcp.h), small writes, connects and closes are ring operations too.
#pragma once

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"
#include "io/reactor_fd.h"

namespace sg::io {

using tcp = asio::ip::tcp;

// "a.b.c.d:port" or "[v6]:port". IPv4 is formatted by hand: Asio's to_string goes through
// inet_ntop's sprintf, which cost 4% of a connection-per-request's user-space instructions.
std::string endpoint_text(const tcp::endpoint& ep);
// "255.255.255.255:65535"
inline constexpr std::size_t kEndpointV4TextMax = 21;
// An IPv4 endpoint's text into `out`, without allocating: its length, or 0 for IPv6.
std::size_t write_endpoint_v4_text(const tcp::endpoint& ep, char (&out)[kEndpointV4TextMax]);

enum class Interest : uint8_t { kRead, kWrite };
struct UringOp;

// Where sockets are created: with a reactor (the epoll driver), registered with it at
// their first wait; without one (io_uring), plain descriptors.
struct IoContext {
  Reactor* reactor = nullptr;
};

class Socket {
 public:
  Socket() = default;
  // Takes ownership of `fd` (already non-blocking). On epoll it joins the reactor at its
  // first wait (io/reactor_fd.h).
  static Socket adopt(IoContext io, int fd);
  Socket(Socket&& o) noexcept
      : desc_(std::move(o.desc_)),
        recv_(o.recv_),
        fd_(o.fd_),
        streaming_(o.streaming_),
        read_drained_(o.read_drained_) {
    o.fd_ = -1;
    o.desc_.reset();
    o.recv_ = nullptr;
    adopt_send(o);
  }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  int native_handle() const { return fd_; }
  bool is_open() const { return fd_ >= 0; }
  // Closes the descriptor; pending reactor waits complete as aborted, a pending receive is
  // cancelled (and bytes it received and no read took are dropped). A background send
  // still running is not: the descriptor closes once it has finished (io/uring.h). `tail`
  // (a TLS close_notify) goes last if the socket takes it without waiting.
  void close(std::string_view tail = {});
  // The reactor registration, made at the first wait (null on io_uring, or when closed).
  ReactorFd* reactor_handle() { return desc_.get(); }
  // io_uring: the socket's receive, started by a readable wait and kept (with what it
  // received) until a read has taken all of it (holds a reference; see io/uring.h).
  UringOp*& receive_op() { return recv_; }
  // io_uring: the socket's last write, a send nobody waits for (io/uring.h). The slot
  // holds a reference until the next write, a flush or the close takes it out
  // (take_send(): the caller owns that reference), or until the ring, when the send has
  // gone out whole, takes it out itself (so an idle connection keeps no copy of its last
  // response). The ring knows the slot (start_background_send puts the send there): the
  // socket tells it when the slot moves (move_send) or when a send it took out for good is
  // still running (disown_send; close does it), both in io/uring.h.
  bool send_pending() const { return send_.load(std::memory_order_relaxed) != nullptr; }
  UringOp* take_send() { return send_.exchange(nullptr, std::memory_order_acq_rel); }
  // Puts back a send take_send() took (still running, or failed).
  void restore_send(UringOp* op) { send_.store(op, std::memory_order_release); }
  std::atomic<UringOp*>& send_slot() { return send_; }
  // io_uring: the last read filled its buffer, so more bytes are probably waiting (a body
  // streams): the next read tries recv first instead of a receive's round trip.
  bool& streaming() { return streaming_; }
  // epoll: the last read left nothing, not even a FIN (EAGAIN, or TCP_INQ said so; for a
  // listener, an accept4 that found no connection), so a readable wait need not look
  // before it sleeps (io/reactor_fd.h). False when unknown.
  bool& read_drained() { return read_drained_; }

  tcp::endpoint local_endpoint() const;

 private:
  // close() while the last write is still being sent (io/uring.h, close_after_send).
  void linger_close(UringOp* send, std::string_view tail);
  // Moves `o`'s send into this socket's slot, telling the ring the slot has moved.
  void adopt_send(Socket& o) noexcept;

  // (fd_ beside streaming_: no padding, so that an idle connection's task stays in its
  // allocation class; see proxy/session.cpp.)
  // epoll driver: the registration (deregistered before fd_ closes). On the heap, so that
  // a socket on io_uring, and an idle connection's task with it, stays small; on epoll one
  // allocation per socket, beside the reactor's own per-descriptor state.
  std::unique_ptr<ReactorFd> desc_;
  UringOp* recv_ = nullptr;
  std::atomic<UringOp*> send_{nullptr};
  int fd_ = -1;
  bool streaming_ = false;
  bool read_drained_ = false;
};

}  // namespace sg::io
