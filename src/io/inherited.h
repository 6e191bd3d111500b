// Listening sockets handed over by whoever started the process: systemd socket activation
// (the LISTEN_FDS protocol: descriptors from 3 on, named by LISTEN_FDNAMES), or any
// launcher that speaks it. A listener adopts the socket bound to its address instead of
// binding one itself, so the kernel keeps queueing connections while stealgate restarts.
//
// Matching, per config listener: the inherited socket whose local address is the
// listener's address (exact ip:port; for port 0, the one named after the listener on
// that host). Failing that, a socket that carries the listener's
// name but listens elsewhere is an error (the socket unit and the config disagree, and
// binding anyway would serve on an address nobody asked for). Otherwise the listener
// binds its own socket. Sockets no listener claims at startup are closed.
#pragma once

#include <chrono>

#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "io/tcp.h"
#include "io/wait.h"

namespace sg::io {

class InheritedSockets {
 public:
  struct Socket {
    int fd = -1;
    std::string name;  // LISTEN_FDNAMES entry ("" when none was given)
    tcp::endpoint local;
    std::string claimed_by;  // the listener that adopted it ("": nobody yet)
  };

  InheritedSockets() = default;
  InheritedSockets(const InheritedSockets&) = delete;
  InheritedSockets& operator=(const InheritedSockets&) = delete;
  ~InheritedSockets();

  // Takes descriptors [first, first + count), named by `names` in order (may be shorter).
  // Each must be a listening TCP socket: returns what is wrong otherwise ("" when all are
  // taken). Call once.
  std::string adopt(int first, int count, const std::vector<std::string>& names);

  // The descriptor for listener `name` on `ep` (see the header comment); -1 when the
  // listener should bind its own, with `err` set when that would be wrong. The socket
  // belongs to the caller from here on.
  int claim(const std::string& name, const tcp::endpoint& ep, std::string& err);
  // Closes every socket nobody claimed; returns a description of each for the log.
  std::vector<std::string> close_unclaimed();

  std::size_t size() const;
  static std::string describe(const Socket& s);

 private:
  mutable std::mutex mu_;
  std::vector<Socket> socks_;
};

// A listening socket for listener `name` on `ep`: the inherited one when `inherited` has
// it, else a new one bound with `opts`. `error` says why there is none (bind failure, or
// an inherited socket of that name on another address).
struct Listening {
  std::optional<TcpListener> listener;
  std::string error;
  bool inherited = false;
  std::chrono::milliseconds in_use_waited{0};  // how long the address was in use (ListenOptions::in_use_wait)
};
Listening listen_on(IoContext ctx, InheritedSockets* inherited, const std::string& name, tcp::endpoint ep,
                    const ListenOptions& opts);

// The listening sockets of a listener that accepts on `want` sockets at once (one per
// worker). The first is listen_on()'s. Every further inherited socket on the same address
// comes next, with or without opts.reuse_port (a binary upgrade hands a group over whole,
// and none of its queued connections may be lost); with it, sockets bound beside them with
// SO_REUSEPORT until there are `want`: the kernel spreads new connections over the group
// by their address hash. A sibling that cannot be bound (an inherited socket without
// SO_REUSEPORT gives EADDRINUSE) ends the group where it is, and `note` says why; with
// opts.exclusive_address such an inherited socket is the group, and there is no note.
struct ListeningGroup {
  std::vector<TcpListener> listeners;
  std::string error;  // there is no socket at all
  std::string note;   // fewer than wanted, and why
  bool inherited = false;
  std::chrono::milliseconds in_use_waited{0};  // the first socket's (Listening::in_use_waited)
};
ListeningGroup listen_group(IoContext ctx, InheritedSockets* inherited, const std::string& name, tcp::endpoint ep,
                            const ListenOptions& opts, std::size_t want);

}  // namespace sg::io
