// A descriptor registered with the epoll driver (Asio's epoll reactor), and readiness
// waits on it that need no syscall when the socket is known to be empty.
//
// Why not Asio's descriptor wait (async_wait): Asio cannot tell whether such a wait starts
// after an edge it has already consumed, so each one re-arms the descriptor with
// epoll_ctl(EPOLL_CTL_MOD): two per proxied GET (client and upstream), 6% of the proxy's
// CPU on epoll (perf, cpu-clock), where nginx makes none. Here a wait is a reactor
// operation of our own, queued on the same reactor the way Asio queues its own reads and
// writes. Two things tell it whether it must look before it sleeps:
//   - the reactor's per-direction flag (try_speculative_), set by every event and cleared
//     by ours only as below: set means an edge came that no reading or writing task took;
//   - the socket's `drained` mark (Socket::read_drained), which says its last read left
//     nothing behind: EAGAIN, or a recvmsg whose TCP_INQ count (io/tcp.cpp) said no byte
//     and no FIN was left. A short read alone would not do: a FIN that came with the last
//     bytes leaves the socket readable (EOF) with no edge to come, which is what nginx
//     needs EPOLLRDHUP for, and Asio's reactor does not report it.
//
// The protocol. The descriptor is registered once, edge-triggered (EPOLLET). When an event
// arrives, the reactor, under the descriptor's mutex, sets the direction's flag and
// performs the queued operations in order; ours wakes its task right there
// (exec::Waker::wake) and reports
//   - done_and_exhausted when its wake won, nothing is queued behind it, and its task will
//     read or write next (`consuming`): the reactor clears the flag, since that task now
//     owns whatever the edge brought;
//   - done otherwise (a wait its task has left, one with more queued behind it, or a watch,
//     whose task only looks): the flag stays set.
// A wait starts in one of three ways:
//   - `check_now` (a readable wait on a socket not drained): poll(2) first; ready wakes the
//     task without queueing anything;
//   - otherwise, with the flag set, the reactor makes its "speculative" perform() call
//     before queueing, and ours polls then;
//   - otherwise it is queued without a syscall.
// A wait that woke its task at start stays queued with no waker (so a start never posts a
// completion to the reactor's queue) and goes at the next event or the close.
//
// Why no edge is lost. A socket is empty when its last read drained it or a writer's
// write would have blocked; whatever arrives after that is an edge. That edge finds the
// wait queued (and wakes it); or it came first, and then it left the flag set unless a
// consuming wait of the same direction took it, which only the socket's one reader (or
// writer) has, and that reader has read since (its read decides `drained`). A socket not
// known to be empty is polled at the wait's start. So two rules for callers, both true of
// src/io: a write waits only after a write or connect that would have blocked, and at most
// one task at a time reads (or writes) a socket; watches may be armed beside the reader.
//
// Waits are not cancelled: one whose task stopped waiting (its deadline or another socket
// won) stays queued until the next event or the close, and then finds its exec::Waker
// stale. The destructor deregisters (EPOLL_CTL_DEL: a duplicate of the descriptor, such
// as a shared listener's, would keep the registration past our close) and aborts what is
// queued.
#pragma once

#include <asio/io_context.hpp>
// (after io_context.hpp, which it needs first)
#include <asio/detail/reactor.hpp>

#include <cstddef>
#include <memory>
#include <system_error>

#include "common/result.h"
#include "exec/coro.h"

namespace sg::io {

class ReactorFd {
 public:
  // Registers `fd` (non-blocking; the caller keeps it and closes it after destroying this)
  // with `ctx`'s reactor.
  static Result<std::unique_ptr<ReactorFd>> register_fd(asio::io_context& ctx, int fd);
  ReactorFd(const ReactorFd&) = delete;
  ReactorFd& operator=(const ReactorFd&) = delete;
  ~ReactorFd();

  // Completes `w`'s wait with `tag` once the descriptor is readable (data, EOF or an
  // error) or, with `writable`, writable; with operation_aborted if it is deregistered
  // first. `check_now` and `consuming`: see above.
  void start_wait(bool writable, bool check_now, bool consuming, exec::Waker w, std::size_t tag);

 private:
  ReactorFd(asio::detail::reactor& r, int fd) : reactor_(r), fd_(fd) {}

  asio::detail::reactor& reactor_;
  asio::detail::reactor::per_descriptor_data data_{};
  int fd_;
};

}  // namespace sg::io
