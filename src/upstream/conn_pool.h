// Keep-alive connections to one endpoint, one idle list per worker. acquire() hands out the
// calling worker's most recently used idle connection that is still healthy (not idle too
// long, and, where it matters, not closed by the upstream); release() takes back only
// connections whose last exchange was cleanly framed (the caller decides).
//
// Per worker, without a lock: a worker's list is touched only by code running on that
// worker's thread (a request's task between two suspensions, and the worker's pinned
// reaper, Gateway::start_pool_reapers), so no two threads ever meet on it. Metrics read
// only the per-worker atomic counts. A connection released on a worker is reused there:
// on io_uring its operations stay on that worker's ring. Code off the runtime's workers
// neither takes nor keeps connections. max_idle bounds each worker's list at
// ceil(max_idle / workers), and all idle connections together.
//
// Tasks move between workers (stealing), so a worker can get back more connections than it
// takes and another take more than it gets back: the first would close connections while
// the second opens new ones (under Connection: close load, 6.7% of proxied requests opened
// an upstream connection). A connection that a full worker list cannot keep goes to one
// shared list, under a mutex, and a worker whose own list is empty takes from there before
// anything is connected. The lock is taken only on those two paths, which would otherwise
// cost a close or a connect.
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
#include <memory>
#include <mutex>
#include <optional>

#include "io/stream.h"

namespace sg::upstream {

struct PoolOptions {
  std::size_t max_idle = 256;
  std::chrono::milliseconds idle_timeout{60'000};
  std::size_t workers = 1;  // the runtime's worker threads: one idle list each
};

class ConnPool {
 public:
  explicit ConnPool(PoolOptions opts);

  static constexpr std::chrono::milliseconds kCheckAfter{1000};

  // `replayable`: the caller can resend the request on a new connection if this one turns
  // out to have been closed by the upstream before it answered.
  std::optional<io::Stream> acquire(bool replayable);
  void release(io::Stream s);
  // Closes the calling worker's idle connections that are older than the idle timeout or
  // that the upstream closed meanwhile; returns how many.
  std::size_t reap();

  std::size_t idle() const;
  // Idle connections the liveness check found closed, reset or not silent (never reused).
  uint64_t stale() const { return stale_.load(std::memory_order_relaxed); }
  // Idle connections reap() found closed by the upstream before any request needed them.
  uint64_t reaped_stale() const { return reaped_stale_.load(std::memory_order_relaxed); }
  const PoolOptions& options() const { return opts_; }

 private:
  struct Idle {
    io::Stream stream;
    std::chrono::steady_clock::time_point since;
  };
  struct alignas(64) Slot {
    std::deque<Idle> idle;           // back = most recently released; its worker only
    std::atomic<std::size_t> count{0};  // idle.size(), for readers on other threads
  };
  Slot* own_slot() const;
  // Whether `got` may serve a request now; closes it (and counts it) when not.
  bool usable(Idle& got, std::chrono::steady_clock::time_point now, bool replayable);
  std::optional<io::Stream> acquire_shared(std::chrono::steady_clock::time_point now, bool replayable);
  std::size_t reap_list(std::deque<Idle>& list, std::chrono::steady_clock::time_point now);

  PoolOptions opts_;
  std::size_t per_worker_max_;
  std::unique_ptr<Slot[]> slots_;
  std::mutex shared_mu_;
  std::deque<Idle> shared_;                   // while idle() < max_idle; under shared_mu_
  std::atomic<std::size_t> shared_count_{0};  // shared_.size(), for idle()
  std::atomic<uint64_t> stale_{0};
  std::atomic<uint64_t> reaped_stale_{0};
};

}  // namespace sg::upstream
