// Keep-alive connections to one endpoint. acquire() hands out the most recently used idle
// connection that is still healthy (not closed by the upstream, not idle too long);
// release() takes back only connections whose last exchange was cleanly framed (the
// caller decides). A mutex per endpoint guards the idle list: held for a few pointer
// moves, never across I/O.
#pragma once

#include <chrono>
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

  std::optional<io::TcpStream> acquire();
  void release(io::TcpStream s);
  // Closes idle connections older than the idle timeout; returns how many.
  std::size_t reap();
  void clear();

  std::size_t idle() const;
  const PoolOptions& options() const { return opts_; }

 private:
  struct Idle {
    io::TcpStream stream;
    std::chrono::steady_clock::time_point since;
  };
  PoolOptions opts_;
  mutable std::mutex mu_;
  std::deque<Idle> idle_;  // back = most recently released
};

}  // namespace sg::upstream
