// Keep-alive connections to one endpoint. acquire() hands out the most recently used idle
// connection that is still healthy (not idle too long, and, where it matters, not closed
// by the upstream); release() takes back only connections whose last exchange was cleanly
// framed (the caller decides). A mutex per endpoint guards the idle list: held for a few
// pointer moves, never across I/O.
//
// The liveness check is a MSG_PEEK recv (a syscall, ~4% of a small proxied request). It
// is skipped for a connection that came back less than kCheckAfter ago when the request
// can be replayed on a new connection should this one turn out closed (forward.cpp replays
// such a request once): upstreams close idle keep-alive connections after seconds (nginx
// 75 s, Node and Apache 5 s), so a connection reused at once is almost never stale, and
// the rare one (an upstream restarting) costs a replay, not an error. A request that
// cannot be replayed always gets the check.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>

#include "io/tcp.h"

namespace sg::upstream {

struct PoolOptions {
  std::size_t max_idle = 256;
  std::chrono::milliseconds idle_timeout{60'000};
};

class ConnPool {
 public:
  explicit ConnPool(PoolOptions opts) : opts_(opts) {}

  static constexpr std::chrono::milliseconds kCheckAfter{1000};

  // `replayable`: the caller can resend the request on a new connection if this one turns
  // out to have been closed by the upstream before it answered.
  std::optional<io::TcpStream> acquire(bool replayable);
  void release(io::TcpStream s);
  // Closes idle connections older than the idle timeout; returns how many.
  std::size_t reap();
  void clear();

  std::size_t idle() const;
  // Idle connections the liveness check found closed, reset or not silent (never reused).
  uint64_t stale() const { return stale_.load(std::memory_order_relaxed); }
  const PoolOptions& options() const { return opts_; }

 private:
  struct Idle {
    io::TcpStream stream;
    std::chrono::steady_clock::time_point since;
  };
  PoolOptions opts_;
  mutable std::mutex mu_;
  std::deque<Idle> idle_;  // back = most recently released
  std::atomic<uint64_t> stale_{0};
};

}  // namespace sg::upstream
