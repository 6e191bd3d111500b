// Keep-alive connections to one endpoint, one idle list per worker. acquire() hands out the
// calling worker's most recently used idle connection that is still healthy (not idle too
// long, and, where it matters, not closed by the upstream); release() takes back only
// connections whose last exchange was cleanly framed (the caller decides).
//
// One idle list per worker, each under its own mutex. A worker releases to and acquires
// from its own list first, so a connection is normally reused on the worker that used it
// (on io_uring its operations stay on that worker's ring) and the mutex is uncontended
// (~20 ns, against the connect or close it saves). Tasks move between workers (stealing):
// a keep-alive client's next request may run on another worker, and a worker may get back
// more connections than it takes while another takes more than it gets back. So a worker
// whose list is empty takes another worker's most recently released connection before
// anything is connected, and a connection that a full list cannot keep goes to another
// worker's list with room; only when every list is full (max_idle in all) is it closed.
// Without this, a keep-alive client's sequential requests opened a new upstream connection
// whenever its task moved, and under Connection: close load 6.7% of proxied requests did.
// The liveness check and closes run outside the locks. Code off the runtime's workers
// neither takes nor keeps connections.
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
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "io/stream.h"

namespace sg::upstream {

// Filled from the cluster's config (clusters[].max_idle_per_endpoint and idle_timeout),
// which holds the defaults: none here to drift from them (zero keeps nothing idle).
struct PoolOptions {
  std::size_t max_idle{};
  std::chrono::milliseconds idle_timeout{};
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
  // that the upstream closed meanwhile; returns how many. Each worker's reaper calls it.
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
    std::mutex mu;
    // back = most recently released; under mu. A vector, not a deque: the stack's depth
    // swings by one per request, and a deque freed and reallocated a 512-byte block
    // whenever that crossed a block boundary (a malloc and free per proxied request).
    std::vector<Idle> idle;
    std::atomic<std::size_t> count{0};  // idle.size(), for idle() without the lock
  };
  // The calling worker's index, or nullopt off the runtime's workers.
  std::optional<std::size_t> own_index() const;
  std::optional<Idle> pop_newest(Slot& slot);
  bool push_if_room(Slot& slot, io::Stream& s);
  // Whether `got` may serve a request now; closes it (and counts it) when not.
  bool usable(Idle& got, std::chrono::steady_clock::time_point now, bool replayable);

  PoolOptions opts_;
  std::size_t per_worker_max_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> stale_{0};
  std::atomic<uint64_t> reaped_stale_{0};
};

}  // namespace sg::upstream
