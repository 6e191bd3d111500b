// Moving a known number of bytes from one plain TCP stream to another inside the kernel:
// splice(2) from the source socket into a pipe, and from the pipe into the sink socket.
// The bytes never enter user space. On loopback a 64 KiB response relayed by recv and
// sendmsg spent 12-15% of the proxy's CPU copying (perf, cpu-clock: _copy_to_iter,
// _copy_from_iter, the head buffer's move, hardened-usercopy checks); spliced, the pages
// the upstream sent are handed to the client socket by reference.
//
// Works on either I/O driver: the splices are non-blocking syscalls made by the worker
// running the task, and a splice that would block waits for readiness (wait_ready: a
// poll on io_uring, the reactor on epoll), never through a receive that would take the
// bytes into a ring buffer. Pipes come from a per-thread pool and go back only empty; a
// transfer that fails or is dropped (the task stopped waiting) with bytes in its pipe
// closes that pipe, so no later transfer sees them.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <system_error>

#include "common/function_ref.h"
#include "exec/coro.h"
#include "io/tcp.h"

namespace sg::io {

struct SpliceResult {
  enum class Failed : uint8_t {
    kNone,         // every byte went out
    kUnavailable,  // nothing was moved: no pipe (descriptors exhausted) or the source
                   // holds received bytes in user space (io_uring receive): copy instead
    kSource,       // the source timed out, closed early or failed (`ec`; EOF: no error)
    kSink,         // the sink timed out or failed (`ec`)
  };
  Failed failed = Failed::kNone;
  std::error_code ec;
  bool prefix_sent = false;  // the prefix went out whole
  uint64_t moved = 0;        // spliced bytes written to the sink
};

struct SpliceTimeouts {
  Clock::duration source;  // per wait for the source to become readable
  Clock::duration sink;    // per wait for the sink to become writable
};

// Writes `prefix` to `to` (after `to`'s earlier writes), then moves exactly `n` bytes from
// `from` to `to`. kUnavailable is decided before anything is written. `source_done` runs
// once the last byte has left `from` (before the last ones reach `to`). Spends coop budget
// per round, as reads and writes do.
exec::Task<SpliceResult> splice_exact(TcpStream& from, TcpStream& to, std::span<const std::string_view> prefix,
                                      uint64_t n, SpliceTimeouts t, FunctionRef<void()> source_done);

}  // namespace sg::io
