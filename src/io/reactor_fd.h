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
// The protocol. The descriptor is registered edge-triggered (EPOLLET) at its first wait,
// not when the socket is made (see "Registration" below). When an event arrives, the
// reactor, under the descriptor's mutex, sets the direction's flag and performs the queued
// operations in order; ours wakes its task right there (exec::Waker::wake) and reports
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
// Registration. The reactor starts a descriptor with both flags set ("not known to be
// empty"), so a first wait would poll even right after a read that saw EAGAIN: one poll
// per new connection (1.0 per request with a connection per request). A first readable
// wait on a drained socket instead registers the descriptor with the wait already queued
// (the reactor's register_internal_descriptor): EPOLL_CTL_ADD reports whatever is ready
// when it is made, as an event that finds the wait, and an edge after it does the same,
// so nothing that came after the read can be missed. A first readable wait on a socket not
// drained polls first (`check_now`) and, finding nothing, registers the same way. A first
// writable wait (a connect's) registers, then starts as above.
//
// Waits are not cancelled: one whose task stopped waiting (its deadline or another socket
// won) stays queued until the next event or the close, and then finds its exec::Waker
// stale. The destructor deregisters and aborts what is queued. A socket that may have
// duplicates (a listener: inherited ones, and io_uring's shared ones, have them) is taken
// out of the epoll set with EPOLL_CTL_DEL, since a duplicate would keep the registration
// past our close; any other is taken out by its close, a syscall fewer per connection. (A
// binary upgrade's fork holds a copy of every descriptor until its exec closes them: an
// event of a socket closed in that window reaches the reactor's recycled state for it,
// whose waits then wake once for nothing, read EAGAIN and wait again.)
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

class Reactor;

class ReactorFd {
 public:
  // For `fd` (non-blocking; the caller keeps it and closes it after destroying this), to
  // be registered with `reactor` at its first wait. `may_be_duplicated`: see above.
  ReactorFd(Reactor& reactor, int fd, bool may_be_duplicated = false)
      : reactor_(reactor), fd_(fd), may_be_duplicated_(may_be_duplicated) {}
  ReactorFd(const ReactorFd&) = delete;
  ReactorFd& operator=(const ReactorFd&) = delete;
  ~ReactorFd();

  void set_may_be_duplicated() { may_be_duplicated_ = true; }

  // Completes `w`'s wait with `tag` once the descriptor is readable (data, EOF or an
  // error) or, with `writable`, writable; with operation_aborted if it is deregistered
  // first, and with the error if it cannot be registered. `check_now` and `consuming`:
  // see above.
  void start_wait(bool writable, bool check_now, bool consuming, exec::Waker w, std::size_t tag);

 private:
  Reactor& reactor_;
  asio::detail::reactor::per_descriptor_data data_{};  // null until the first wait
  int fd_;
  bool may_be_duplicated_;
};

}  // namespace sg::io
