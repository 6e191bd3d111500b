// TCP streams and listeners on the executor.
//
// On epoll, reads and writes are plain non-blocking syscalls made by the worker running the
// task; only when one would block does the task wait for readiness through the reactor
// (wait_ready). On io_uring a read that finds nothing waits with the socket's receive
// (io/uring.h) and copies what it brought (a read after one that filled its buffer tries
// recv first: a body streams); a write under 8 KiB is a send on the ring that owns a copy
// of its bytes and that the write does not wait for (bigger ones are sendmsg, as on
// epoll); connect is a ring operation, and a
// listener's accepts are one multishot accept it keeps, or a single-shot accept per wait
// where several listeners share the socket (share(); io/uring.h). Each completed
// operation spends one unit of the task's coop budget.
// Deadlines are absolute (io::Deadline); an expired wait yields errc::timed_out and
// leaves the socket usable (e.g. to write a 408 before closing).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "common/result.h"
#include "exec/coro.h"
#include "io/wait.h"

namespace sg::io {

struct IoResult {
  std::error_code ec;
  std::size_t n = 0;
};

// kMayQueue: on io_uring a small write may be a background send (see TcpStream::flush).
// kNow: the bytes go into the socket before the write returns (a splice follows them).
enum class WriteMode : uint8_t { kMayQueue, kNow };

// kRestOfMessage: the read is of the rest of a message the peer is streaming (a body), so
// the peer may be stalled on our receive window; before such a read waits, the window
// update goes out (push_window_update). kDefault: a head, or a read between messages.
enum class ReadMode : uint8_t { kDefault, kRestOfMessage };

// Sends now the acknowledgement, with the receive window it opens, that the kernel may be
// holding back on `fd` after we drained its bytes. Called only before a wait for more of a
// message the peer streams (one setsockopt).
//
// Why: a sender that filled our receive window waits for an update. Draining the socket
// does not always send one: a request/response connection is in Linux's delayed-ACK
// ("pingpong") mode, where a read that empties the socket acknowledges at once only if
// the window grew "significantly" (twice, and by at least one MSS; on loopback the MSS is
// 65,483 bytes). So a window just short of a 64 KiB response stayed shut until the
// delayed-ACK timer, about 40 ms. Measured (GET /64k through the proxy, wrk -c64, each
// process in its own session as ../shared/bench/proxy runs them): 1-2% of responses lost
// their last 4,096 bytes for ~45 ms in tcpdump, waiting for our ACK; p99 26.8 ms, with
// this 7.3-8.2 ms.
void push_window_update(int fd);

class TcpStream {
 public:
  TcpStream() = default;
  // `s` must already be in non-blocking mode (accept4 with SOCK_NONBLOCK, or connect()
  // below): reads and writes are raw non-blocking syscalls.
  explicit TcpStream(Socket s) : sock_(std::move(s)) {}
  TcpStream(TcpStream&&) noexcept = default;
  TcpStream& operator=(TcpStream&&) noexcept = default;

  bool is_open() const { return sock_.is_open(); }
  int native_handle() { return sock_.native_handle(); }
  Socket& socket() { return sock_; }

  // Reads at most buf.size() bytes; n == 0 with no error means the peer closed.
  exec::Task<IoResult> read_some(std::span<char> buf, Deadline dl = {}, ReadMode mode = ReadMode::kDefault);
  // One non-blocking read: nullopt when nothing is there yet (no wait, no budget spent).
  std::optional<IoResult> try_read(std::span<char> buf);
  // Writes every byte of every buffer (gathered with writev), or fails.
  exec::Task<std::error_code> write_all(std::span<const std::string_view> bufs, Deadline dl = {},
                                        WriteMode mode = WriteMode::kMayQueue);
  exec::Task<std::error_code> write_all(std::string_view data, Deadline dl = {});
  // co_await wait_readable(other, dl) -> EitherReadable: waits until this stream (0) or,
  // when given, `other` (1) is readable (data, EOF or an error). An awaiter, not a
  // coroutine: the wait lives in the caller's frame (no frame allocation per wait, and an
  // idle connection holds one frame fewer).
  EitherAwaiter wait_readable(TcpStream* other, Deadline dl = {}) {
    return EitherAwaiter{sock_, other != nullptr ? &other->sock_ : nullptr, dl};
  }

  // Copies up to buf.size() of the bytes a read would return now, without consuming
  // them: those a finished receive holds (io_uring), else a MSG_PEEK recv. nullopt when
  // none are there yet; n == 0 is EOF. For a prefix whose length shows only in its bytes
  // (a PROXY protocol header): peek, then read exactly that many.
  std::optional<IoResult> peek_some(std::span<char> buf);
  // What a read would find, without blocking or consuming anything (one MSG_PEEK recv).
  enum class PeerState : uint8_t { kSilent, kData, kClosed };  // kClosed: EOF, reset or error
  PeerState peek();
  // The peer has closed or reset (bytes waiting to be read do not count: a pipelining
  // client is still there).
  bool peer_closed() { return peek() == PeerState::kClosed; }
  // After a readable wait completed: false when its receive found every provided buffer
  // of the ring in use (-ENOBUFS) and the socket has nothing after all (a poll wake-up
  // without bytes: receives are poll-first, io/uring.h). That receive is then dropped (the
  // next wait starts a fresh one); a MSG_PEEK recv tells the two cases apart, and only
  // after such a completion.
  bool woke_with_input();
  // A read would block: the peer has sent nothing and has not closed or reset.
  bool silent() { return peek() == PeerState::kSilent; }

  // On io_uring a write under 8 KiB returns once its send is queued (a background send,
  // io/uring.h): the next write, flush() or close() settles it, and its error, if any,
  // comes back from the next write or flush. flush() waits until the last write has gone
  // out (into the socket), or fails (errc::timed_out at `dl`, the send then given up).
  struct FlushAwaiter;
  FlushAwaiter flush(Deadline dl);
  // Without waiting: the last write has gone out whole (false: still being sent, or it
  // failed), e.g. before a connection goes back to a pool.
  bool writes_done();
  // Flushes, then shuts the sending side down (FIN after every byte written).
  exec::Task<void> shutdown_write(Deadline dl);
  // `tail`: a few last bytes (a TLS close_notify), sent after every write if the socket
  // takes them at once. A write still being sent finishes first (Socket::close).
  void close(std::string_view tail = {});
  tcp::endpoint local_endpoint() const;

  // Connects to `ep` (non-blocking connect + writable wait), a socket on `io`.
  static exec::Task<Result<TcpStream>> connect(IoContext io, tcp::endpoint ep, Deadline dl);

 private:
  friend class TcpListener;
  // io_uring: copies what the socket's completed receive holds (an error or EOF too);
  // nullopt when there is none, or it is still running.
  std::optional<IoResult> take_received(std::span<char> buf);
  Socket sock_;
};

// co_await stream.flush(dl) -> std::error_code: the socket's background send settled (at
// once when there is none, or it has completed). Dropped while it waits, it only stops
// waiting; the send goes on.
struct TcpStream::FlushAwaiter {
  Socket& sock;
  Deadline deadline;
  exec::TimerEntry timer{};
  UringOp* op = nullptr;  // the send, taken out of the socket (our reference)
  bool armed = false;     // we are its waiter

  FlushAwaiter(Socket& s, Deadline dl) : sock(s), deadline(dl) {}
  FlushAwaiter(const FlushAwaiter&) = delete;
  FlushAwaiter& operator=(const FlushAwaiter&) = delete;
  ~FlushAwaiter();
  bool await_ready() noexcept;
  void await_suspend(std::coroutine_handle<> h);
  std::error_code await_resume();
};

inline TcpStream::FlushAwaiter TcpStream::flush(Deadline dl) { return FlushAwaiter(sock_, dl); }

struct ListenOptions {
  int backlog = 1024;
  bool reuse_port = false;  // SO_REUSEPORT: sockets of one owner share the address (listen_group)
  // With reuse_port, for the first socket of a group: its bind succeeds only on an address
  // no socket holds (SO_REUSEPORT is set after the bind, before listen), so that a second
  // process on the address fails as without reuse_port instead of joining the group and
  // taking part of its connections. The sockets bound beside it join as usual.
  bool exclusive_address = false;
  // While the address is in use, try again (every 100 ms) for this long: at a restart the
  // previous process may still hold it for a moment (io_uring releases a killed process's
  // sockets only after it has exited). 0: fail at once.
  std::chrono::milliseconds in_use_wait{0};
};

class TcpListener {
 public:
  // Binds and listens; port 0 picks a free port (see local_endpoint()).
  static Result<TcpListener> bind(IoContext io, tcp::endpoint ep, const ListenOptions& opts);
  // Takes over `fd`, a socket already bound and listening (inherited, see inherited.h):
  // it becomes non-blocking and gets TCP_NODELAY for its accepted sockets, as bind() does.
  // On failure `fd` is closed.
  static Result<TcpListener> adopt(IoContext io, int fd);
  // Another listener on this one's socket (its descriptor duplicated), for an accepting
  // task on another worker: connections come from the one kernel queue to whichever task
  // waits. From then on both take one connection per wait on io_uring (a single-shot
  // accept on the waiting task's ring) instead of a multishot accept, so that a connection
  // goes to a ring that waits for one rather than to a busy one (io/uring.h, "Accepts").
  // Share before accepting (an accept already running stays multishot until it ends).
  // Stop accepting (stop_accepting) and close each of them.
  Result<TcpListener> share();

  TcpListener(TcpListener&&) noexcept = default;
  TcpListener& operator=(TcpListener&&) noexcept = default;

  // Accepts one connection. Accepted streams have TCP_NODELAY on (inherited from the
  // listening socket, so no per-connection setsockopt). `peer`, when given, receives the
  // peer's address (a stream does not keep it: 32 bytes for the connection's life).
  // EMFILE/ENFILE and other resource errors come back as errors (the caller backs off);
  // the listener stays usable. On io_uring the first wait starts the listener's multishot
  // accept, which then takes every connection as it comes (io/uring.h); a task dropped
  // while it waits leaves it running, and loses no connection. One accepting task at a time
  // (a listener per task: share()). A shared listener's wait starts a single-shot accept.
  exec::Task<Result<TcpStream>> accept(Deadline dl = {}, tcp::endpoint* peer = nullptr);
  // The two halves of accept(), for a caller that decides between them whether to take a
  // connection at all (a connection limit): wait until a connection is queued (or the
  // deadline passes), and take one if there is one (nullopt: none queued). They leave
  // connections in the kernel's backlog: wait_acceptable() stops a multishot accept that
  // accept() left running (try_accept() still yields what it took).
  exec::Task<std::error_code> wait_acceptable(Deadline dl = {});
  Result<std::optional<TcpStream>> try_accept(tcp::endpoint* peer = nullptr);
  // io_uring: stops the ring's accept and waits for its last completion, yielding the
  // connections it took that no accept() took and those the kernel queued until then
  // (they are the listener's: a listener that stops, to drain or hand its socket to a new
  // process, serves them). Afterwards the listener takes no connection from the kernel
  // until the next accept(). Nothing on epoll.
  struct TakenConnection {
    TcpStream stream;
    tcp::endpoint peer;
  };
  exec::Task<std::vector<TakenConnection>> stop_accepting();
  tcp::endpoint local_endpoint() const { return sock_.local_endpoint(); }
  void close() { sock_.close(); }
  bool is_open() const { return sock_.is_open(); }
  int native_handle() { return sock_.native_handle(); }

 private:
  TcpListener(Socket s, IoContext io, bool shared = false) : sock_(std::move(s)), io_(io), shared_(shared) {
    // Inherited and shared listening sockets have duplicates (io/reactor_fd.h).
    if (ReactorFd* r = sock_.reactor_handle()) r->set_may_be_duplicated();
  }
  // Waits for a connection: the multishot accept's next one on io_uring, readability on
  // epoll.
  exec::Task<std::error_code> wait_accepted(Deadline dl);
  // An accepted descriptor as a stream, its peer's address into `peer` (when given): `from`,
  // as accept4 or a single-shot accept on the ring reported it, or asked with getpeername
  // when null (a multishot accept reports none; nullopt when the peer has gone already).
  Result<std::optional<TcpStream>> adopt_accepted(int fd, tcp::endpoint* peer, const tcp::endpoint* from = nullptr);
  void take_backlog(std::vector<TakenConnection>& out);
  Socket sock_;  // on io_uring, its receive_op() is the accept
  IoContext io_;  // where accepted sockets go
  bool shared_ = false;  // share()d: single-shot accepts on io_uring
};

// Suspends the current task until `t` (or for `d`), on the executor's timers.
using exec::sleep_for;
using exec::sleep_until;

}  // namespace sg::io
