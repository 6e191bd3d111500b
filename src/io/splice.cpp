#include "io/splice.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/thread_cache.h"
#include "exec/reclaim.h"

namespace sg::io {

namespace {

// A pipe holds one page reference per slot, and the default 16 slots held 57,587 bytes of
// a 64 KiB body (its first page partly consumed with the head): two rounds of splices
// where one would do. 32 slots take a 64 KiB body at once, and a megabyte in 8 rounds.
constexpr int kPipeSize = 128 * 1024;

struct Pipe {
  int r = -1;
  int w = -1;
  std::size_t capacity = 0;  // bytes it holds (the kernel may grant less than the default)
};

void close_pipe(void* p) noexcept {
  auto* pipe = static_cast<Pipe*>(p);
  ::close(pipe->r);
  ::close(pipe->w);
  delete pipe;
}

// Empty pipes kept per thread for the next transfer: making one costs two descriptors and
// a pipe2 syscall.
using Pipes = PerThreadCache<struct PipesTag, 16, close_pipe>;

// An idle worker closes the pipes it keeps (exec/reclaim.h). Their memory is the kernel's
// (about a kilobyte each while empty), not counted as freed here.
std::size_t reclaim_pipes() noexcept {
  Pipes::clear();
  return 0;
}
const bool kPipesReclaimable = (exec::add_idle_reclaimer(&reclaim_pipes), true);

// A pipe for one transfer: back to the pool when it ends empty, closed otherwise (bytes
// left in it belong to a transfer that failed or was dropped).
class PipeLease {
 public:
  static PipeLease take() {
    if (void* kept = Pipes::take()) return PipeLease(static_cast<Pipe*>(kept));
    int fds[2];
    if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) return PipeLease(nullptr);
    // Refused past the user's pipe-user-pages-soft limit: the default size then.
    (void)::fcntl(fds[1], F_SETPIPE_SZ, kPipeSize);
    const int size = ::fcntl(fds[1], F_GETPIPE_SZ);
    return PipeLease(new Pipe{fds[0], fds[1], size > 0 ? static_cast<std::size_t>(size) : 4096});
  }
  PipeLease(const PipeLease&) = delete;
  PipeLease& operator=(const PipeLease&) = delete;
  ~PipeLease() {
    if (pipe_ == nullptr) return;
    if (held != 0 || !Pipes::keep(pipe_)) close_pipe(pipe_);
  }
  explicit operator bool() const { return pipe_ != nullptr; }
  int r() const { return pipe_->r; }
  int w() const { return pipe_->w; }
  std::size_t room() const { return pipe_->capacity > held ? pipe_->capacity - held : 0; }

  std::size_t held = 0;  // bytes in the pipe

 private:
  explicit PipeLease(Pipe* p) : pipe_(p) {}
  Pipe* pipe_;
};

// One non-blocking splice; -errno on failure (never -EINTR).
ssize_t splice_now(int in, int out, std::size_t len) {
  for (;;) {
    const ssize_t n = ::splice(in, nullptr, out, nullptr, len, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n >= 0) return n;
    if (errno != EINTR) return -errno;
  }
}

std::error_code sys_error(ssize_t neg_errno) {
  return {static_cast<int>(-neg_errno), std::system_category()};
}

// Whether `from` can be spliced from now: bytes an io_uring receive took are in a ring
// buffer, ahead of what the socket holds (they would come out of order).
bool can_splice_from(TcpStream& from) { return from.is_open() && from.socket().receive_op() == nullptr; }

}  // namespace

exec::Task<SpliceResult> splice_exact(TcpStream& from, TcpStream& to, std::span<const std::string_view> prefix,
                                      uint64_t n, SpliceTimeouts t, FunctionRef<void()> source_done) {
  using F = SpliceResult::Failed;
  SpliceResult res;
  auto fail = [&res](F side, std::error_code ec) {
    res.failed = side;
    res.ec = ec;
    return res;
  };
  if (!can_splice_from(from) || !to.is_open()) co_return fail(F::kUnavailable, {});
  PipeLease pipe = PipeLease::take();
  if (!pipe) co_return fail(F::kUnavailable, {});
  // Sent now, not queued on the ring: the splices below must follow it.
  if (std::error_code ec = co_await to.write_all(prefix, Deadline::after(t.sink), WriteMode::kNow)) {
    co_return fail(F::kSink, ec);
  }
  res.prefix_sent = true;
  uint64_t left = n;
  while (left > 0 || pipe.held > 0) {
    // EAGAIN from the source also means a full pipe (its slots are taken by small pieces).
    bool source_blocked = false;
    if (left > 0 && pipe.room() > 0) {
      const ssize_t r = splice_now(from.native_handle(), pipe.w(), std::min<uint64_t>(left, pipe.room()));
      from.socket().read_drained() = r == -EAGAIN;  // (for epoll's readable waits: io/reactor_fd.h)
      if (r == 0) co_return fail(F::kSource, {});  // closed before the end
      if (r > 0) {
        left -= static_cast<uint64_t>(r);
        pipe.held += static_cast<std::size_t>(r);
        if (left == 0) source_done();
      } else if (r == -EAGAIN) {
        source_blocked = true;
      } else {
        co_return fail(F::kSource, sys_error(r));
      }
    }
    bool sink_blocked = false;
    if (pipe.held > 0) {
      const ssize_t w = splice_now(pipe.r(), to.native_handle(), pipe.held);
      if (w > 0) {
        pipe.held -= static_cast<std::size_t>(w);
        res.moved += static_cast<uint64_t>(w);
      } else if (w == -EAGAIN || w == 0) {
        sink_blocked = true;
      } else {
        co_return fail(F::kSink, sys_error(w));
      }
    }
    // Wait only when no side can move: the sink when the pipe cannot take more (or the
    // source has nothing either), the source when the pipe is empty.
    if (sink_blocked && (source_blocked || left == 0 || pipe.room() == 0)) {
      if (std::error_code ec = co_await wait_ready(to.socket(), Interest::kWrite, Deadline::after(t.sink))) {
        co_return fail(F::kSink, ec);
      }
    } else if (source_blocked && pipe.held == 0) {
      push_window_update(from.native_handle());  // (io/tcp.h)
      if (std::error_code ec = co_await wait_ready(from.socket(), Interest::kRead, Deadline::after(t.source))) {
        co_return fail(F::kSource, ec);
      }
    }
    co_await exec::coop_checkpoint();
  }
  co_return res;
}

}  // namespace sg::io
