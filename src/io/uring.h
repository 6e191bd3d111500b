// The io_uring driver: one ring per worker (exec::DriverFactory), driven by that worker
// alone. A socket wait is an operation on the ring of the worker whose task waits
// (IORING_OP_POLL_ADD); its completion is reaped by that worker (at its park, and when it
// polls its driver every event_interval ticks) and wakes the task there, through the
// usual exec::Waker (LIFO slot or local queue, coop budget). Submissions queue in the
// ring and go to the kernel in batches: when the worker's local queue runs dry (before it
// steals or parks, exec::Driver::flush), at its driver polls (every event_interval ticks,
// and after a task poll of runtime.driver_visit_after_poll_us: exec/worker.cpp,
// visit_driver_after), and when the queue is full. Flushing after every task poll instead
// cost one io_uring_enter per wait (2.1 per proxied GET at 64 connections, 0.3 batched)
// and 13% more CPU per request at 1,000 connections. When the flush finds completions
// ready (posted, or task work the kernel holds for the ring: IORING_SQ_TASKRUN), the
// worker polls them at once instead of stealing or parking: three parks in four of a
// proxied keep-alive GET used to return at once, each through the idle protocol.
// A parked worker sleeps in io_uring_enter on its own ring; unpark() writes the ring's
// eventfd, on which a read is always pending.
//
// One thread per ring: a ring is made disabled, with SINGLE_ISSUER and DEFER_TASKRUN
// (COOP_TASKRUN on kernels before 6.1, and where a syscall filter refuses io_uring_register,
// which enabling needs), and its worker enables it (attach), which makes that
// thread the only one the kernel lets submit to it or wait on it. Completions are then
// posted only when the worker collects them (poll, park, flush), not at whatever syscall
// it makes next. Other threads queue to the ring instead (cancels, buffer returns,
// lingering sends: below), and the runtime shuts the ring down on the worker's thread
// (exec::Scheduler::shutdown).
//
// Work stealing: a task stolen to another worker keeps its operations where it started
// them; their completions land on the first worker's ring and wake the task from there
// (any worker may poll any task). Its next operations go to the ring of the worker it
// then runs on.
//
// Sends: a write is a send (IORING_OP_SEND) of a copy of its bytes owned by the operation.
// Like the receives' SQEs it reaches the kernel with the next batch, so a response costs no
// syscall of its own; the copy (a response head and body piece, memcpy) is cheaper than
// the sendmsg it replaces. Nobody waits for it ("background" send, Socket::take_send): the
// write returns once it is queued, and the socket's next write, its flush, or its close
// settles it; or the ring, once every byte has gone out, takes it out of the socket's slot
// and frees it, so an idle keep-alive connection holds no copy of its last response (a
// third of its memory). The ring knows the slot, under the operation's lock: a socket
// that takes a running send out for good (its close) disowns it, one that moves points
// the ring at its new slot (disown_send, move_send), so the ring never names a slot that
// is gone. Waiting cost two of the four task polls of a proxied keep-alive GET (a send
// each way), each with a timer armed and cancelled; the copy already made the wait
// unnecessary for memory safety. A socket has at
// most one background send, so its bytes cannot be reordered; a short completion (the
// kernel may send part and stop, even with MSG_WAITALL) is resent from the copy by the
// ring itself, so a completed background send has sent everything or failed. Closing a
// socket whose send has not completed lingers (close_after_send): the ring closes the
// descriptor once the send is done, or cancels it at the write's deadline; a stopping
// ring gives lingering sends up to kShutdownLinger before it cancels everything. When the
// send's submission is still the last one queued (a response written and its connection
// closed in one task poll, the usual case), the close appends its tail (a TLS
// close_notify) to the send's bytes and links the descriptor's close behind it
// (chain_fin): the FIN leaves in the same batch as the bytes. Before, it waited for the
// send's completion to be reaped and the close's own submit after that: under load, a
// client that reads until the server closes (HTTP/1.0, a body delimited by the close,
// TLS clients waiting for close_notify) saw EOF 10% of the time 200-450 us after the
// response's last byte (nginx 25 us, its close follows its write); with the chain 9-12 us.
// A socket's receive and its background send may run on two rings (a task stolen
// between starting them); the close must then come after both submissions: the
// receive's ring cancels it and, once that has reached the kernel (after its next
// submit), hands the lingering send to the send's ring, which closes.
//
// Receives: a readable wait on a stream is a receive (IORING_OP_RECV with IOSQE_BUFFER_SELECT)
// into one of the ring's provided buffers (a buffer ring of up to kReceiveBuffers x
// kReceiveBufferSize, registered per ring), so no buffer is tied to a socket until bytes
// arrive: an idle keep-alive connection holds none. The ring starts with
// kInitialReceiveBuffers and doubles, up to kReceiveBuffers, once more than one receive
// in kShortageRate has kept finding none free for kGrowInterval (each such receive reads
// with a plain recv instead):
// the kernel hands buffers out in ring order, so every provided buffer's page becomes
// resident, and a ring that rarely needs more than a few keeps only those (after 3 s of
// wrk -c4, PSS 12.1 MiB against 13.8 with all 256 provided from the start; -c64: 64
// buffers, 12.7 against 14.2). Buffers are never withdrawn: the kernel may hold any
// of them. The completed operation holds the
// bytes until the task takes them (io/tcp.cpp copies them into the reader's buffer), and
// the buffer goes back to the ring that provided it: at once on that ring's thread, through
// a queue drained at its next poll or park from any other. A receive belongs to its socket,
// not to one wait: a wait that stops waiting (deadline, the other socket of an either-wait)
// only disarms it, and the next read on the socket takes what it received, so no byte is
// lost or reordered. Closing the socket cancels it.
//
// A receive is submitted poll-first (IORING_RECVSEND_POLL_FIRST, Linux 5.19 like buffer
// rings). It starts after a read found nothing, or where nothing can be there yet (the
// response to a request just sent, a keep-alive client's next request after our
// response), so the recv that io_uring would otherwise try before arming its poll fails:
// both receives of a proxied keep-alive GET did, 3.0-3.8% of the proxy's CPU samples
// (0.5-0.6% poll-first). Bytes already there are taken at once all the same (the poll
// finds the socket ready). And the buffer is picked only once bytes are there, so a
// silent socket's wait during a shortage of buffers stays a wait.
//
// Single-shot, not multishot, on purpose: a multishot receive keeps filling the ring's
// shared buffers for a connection whose task is not reading (a body relayed to a slow
// upstream), which both drops TCP backpressure and starves the other sockets of the
// worker; one receive per wait costs one SQE, and SQEs are submitted in batches, so it
// costs no syscall.
//
// Accepts: a listener's accepts on io_uring are one multishot accept (IORING_OP_ACCEPT with
// IORING_ACCEPT_MULTISHOT), started by its first wait and kept, like a stream's receive, by
// its socket (Socket::receive_op): every connection the kernel completes is accepted by the
// ring and its descriptor queued in the operation until the listener takes it, so a busy
// listener costs no accept4 of its own and no EAGAIN one either (0.7 per connection in the
// close scenario), only a getpeername (a multishot accept reports no peer address). A wait
// that stops waiting only disarms it. Stopping it (stop_accepts, or the ring itself when
// kMaxAcceptsQueued wait untaken) cancels it; the connections queued before its last
// completion are still the listener's to take, and the ones nobody takes are closed with
// the operation.
//
// One socket accepted from by several rings (TcpListener::share: a loop per worker) takes
// single-shot accepts instead, one per wait. An accept's poll waits on the socket
// exclusively, and io_uring's wake callback claims the wake-up whether or not its ring's
// thread is busy: a multishot accept, never leaving the wait queue, would take every
// connection on the first ring that armed, however long that worker computes (a TLS
// handshake: ~300 us). A single-shot one leaves the queue at its wake-up, so the next
// connection wakes the next armed ring, and a busy worker arms again only once it has
// reaped its accept. (And a woken accept takes the oldest connection queued, so one that
// woke a busy ring is taken by the next ring that runs.) Having its own address buffer, a
// single-shot accept also reports the peer's address: no getpeername. Measured with TLS full
// handshakes, 2 workers, 6 pairs alternating with one multishot accept: +3% to +26%
// connections/s, machine idle 4.0-4.8% against 7.1-9.1%. The price is a submission and
// an armed poll per connection, which plain HTTP's short connections do not recoup
// (proxy/gateway.cpp shares only TLS listeners' sockets).
//
// Cancellation: a wait that lost a race (its deadline fired, or the other socket of an
// either-wait) or whose task was dropped cancels its operation (IORING_OP_ASYNC_CANCEL by
// user_data). An operation is reference-counted (its ring's reference until the final
// completion, the waiter's until it cancelled or saw it complete), so a cancel never
// names freed or reused memory. A cancel from another thread than the ring's (a stolen
// task, a task dropped at shutdown) is queued to the ring and the ring unparked. The
// operation's final completion then finds the wait already taken (the waker's generation
// moved on) and only drops its references: a task that stopped waiting never sees it, and
// a closed socket holds no operation once its cancels are flushed.
#pragma once

#include <liburing.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/result.h"
#include "exec/coro.h"
#include "exec/driver.h"
#include "exec/spin_lock.h"

namespace sg::io {

class UringDriver;

// One in-flight operation. Allocated by start_poll() or start_receive(), freed by its last
// reference.
struct UringOp {
  std::atomic<uint32_t> refs{2};      // the ring's (until the final CQE) and the waiter's
  std::atomic<bool> completed{false};  // the final CQE was reaped (release/acquire)
  // Guards `waker` (and `tag`) between a completion on the ring's thread and a receive's
  // waiter re-arming or disarming it from the thread its task runs on.
  exec::SpinLock lock;
  exec::Waker waker;
  std::size_t tag = 0;
  UringDriver* ring = nullptr;
  // A receive's result, written before `completed` is released: bytes (or 0 at EOF, or
  // -errno), the provided buffer holding them (-1: none) and how many were taken.
  bool receive = false;
  // A multishot accept: its queue of accepted descriptors follows the operation
  // (accept_queue(), under `lock`); `res` is its final result once `completed`.
  bool accepts = false;
  // A background send (its state and bytes follow the operation); `abandoned` (under
  // `lock`): cancelled, so a short completion is final instead of resent.
  bool background = false;
  bool abandoned = false;
  uint32_t extra = 0;  // bytes allocated after the operation (a send's copy of its data)
  int res = 0;
  int buffer = -1;
  uint32_t taken = 0;
};

// Drops the waiter's reference to `op`, cancelling it first if it has not completed.
void cancel_and_release(UringOp* op) noexcept;
// For a socket with a receive: drops the socket's reference to `op` and closes `fd` after
// cancelling it. A receive whose submission may not have reached the kernel yet names the
// descriptor by number, so the number must not be freed (and reused by the next accept)
// before it has: the close is then a submission on the receive's ring, after the cancel.
void cancel_and_close(UringOp* op, int fd) noexcept;
// Another reference to `op` / dropping one (a receive's buffer goes back to its ring with
// the last).
void retain(UringOp* op) noexcept;
void release(UringOp* op) noexcept;
// The waiter of an operation its socket keeps across waits (a stream's receive, a
// listener's multishot accept): arm_waiter() makes `w` its waiter, or wakes it at once when
// the operation has something to take (a receive: it completed; an accept: a descriptor
// queued, or its end); disarm_waiter() stops waiting (the operation goes on, and what it
// brings stays in it). One waiter at a time.
void arm_waiter(UringOp* op, exec::Waker w, std::size_t tag) noexcept;
void disarm_waiter(UringOp* op) noexcept;
// A listener's accept, multishot or single-shot (UringDriver::start_accepts). take_accepted()
// takes the next descriptor it queued (the caller owns it), or says there is none yet, or
// that the operation has ended (its error, 0 when it ended without one) and queues no more.
// stop_accepts() cancels it (from any thread; once).
struct Accepted {
  int fd = -1;         // >= 0: a connection
  bool ended = false;  // no connection, and none will come: `error` says why
  int error = 0;       // -errno, or 0
  // The peer's address, where the accept reported it (single-shot accepts; peer_len 0:
  // none); it lives in the operation, as long as the caller's reference to it.
  const sockaddr* peer = nullptr;
  socklen_t peer_len = 0;
};
Accepted take_accepted(UringOp* op) noexcept;
void stop_accepts(UringOp* op) noexcept;
// The received bytes of a completed receive not taken yet.
std::span<const char> received_bytes(const UringOp* op) noexcept;
// A completed background send: every byte went out (no error), or why not.
std::error_code background_send_result(const UringOp* op) noexcept;
// Stops a background send (its write timed out, or the connection is being dropped):
// cancels it if it has not completed and drops the caller's reference (disowning it).
void abandon_send(UringOp* op) noexcept;
// A background send taken out of its socket's slot for good while still running: the ring
// no longer looks at the slot. / Puts a send taken out of one slot into `slot`, which the
// ring then looks at instead (a socket that moves).
void disown_send(UringOp* op) noexcept;
void move_send(UringOp* op, std::atomic<UringOp*>* slot) noexcept;
// Closes the socket of the background send `send` (not completed) once it has finished,
// or cancels the send at its deadline and then closes; after a send that went out whole,
// `tail` (a TLS close_notify) goes too if the socket takes it at once. `recv` (or null),
// the socket's receive, is cancelled first (on its ring, which may be another). Takes the
// caller's references. Any thread.
void close_after_send(UringOp* send, UringOp* recv, std::string tail) noexcept;

class UringDriver final : public exec::Driver {
 public:
  // A ring of `entries` submission slots with its wake-up eventfd; the error when the
  // kernel refuses io_uring (sysctl kernel.io_uring_disabled, a seccomp filter, ENOMEM).
  static Result<std::unique_ptr<UringDriver>> create(unsigned entries = 256);
  // Whether this kernel and process may use io_uring (tries to set up a small ring);
  // `why` gets the reason when not.
  static bool available(std::string& why);
  ~UringDriver() override;
  UringDriver(const UringDriver&) = delete;
  UringDriver& operator=(const UringDriver&) = delete;

  uint32_t park(uint32_t max_events, std::optional<std::chrono::milliseconds> timeout) override;
  uint32_t poll(uint32_t max_events) override;
  void attach() override;
  void detach() override;
  bool visited_when_idle() const override { return true; }
  bool flush() override;
  void unpark() override;
  void shutdown() override;

  // Starts a poll for `events` (POLLIN/POLLOUT) on `fd` that completes `w`'s wait with
  // `tag` (or with the error). Only from the ring's worker thread. Returns the operation,
  // holding the caller's reference (give it back with cancel_and_release).
  UringOp* start_poll(int fd, uint32_t events, exec::Waker w, std::size_t tag);
  // Starts a receive on `fd` into one of this ring's provided buffers, waking `w` with
  // `tag` when it completes (its result is in the operation, not the wake). Only from the
  // ring's worker thread, and only when receives() (the kernel took the buffer ring).
  UringOp* start_receive(int fd, exec::Waker w, std::size_t tag);
  bool receives() const { return buffers_ != nullptr; }
  static constexpr std::size_t kMaxSend = 64 * 1024;
  // Starts a background send on `fd` of every byte of `bufs` (at most kMaxSend), which
  // nobody waits for (see above): a lingering close cancels it at `deadline`. The
  // operation owns a copy of the bytes: a task that is dropped never leaves the kernel
  // reading memory that is gone. Only from the ring's worker thread. Puts the operation,
  // holding the socket's reference, into `slot` (which must be empty).
  void start_background_send(int fd, std::span<const std::string_view> bufs,
                             std::chrono::steady_clock::time_point deadline, std::atomic<UringOp*>& slot);
  // Starts a connect of `fd` to `addr` (copied into the operation), waking `w` with `tag`
  // when the handshake is done (op->res: 0 or -errno). Only from the ring's worker thread.
  UringOp* start_connect(int fd, const sockaddr* addr, socklen_t len, exec::Waker w, std::size_t tag);
  // Starts an accept on the listening socket `fd` (non-blocking, close-on-exec descriptors),
  // multishot or for one connection, with no waiter yet (arm_waiter). Only from the ring's
  // worker thread. Returns the operation, holding the caller's reference.
  UringOp* start_accepts(int fd, bool multishot);
  // Closes `fd` with the next batch of submissions (IORING_OP_CLOSE: no syscall of its
  // own). Only from the ring's worker thread; false once the ring has shut down (the
  // caller closes it then).
  bool close_later(int fd);

  // Connections a multishot accept holds for its listener before it stops taking more
  // (those the kernel completed before the cancel reached it still arrive; see
  // complete_accept).
  static constexpr std::size_t kMaxAcceptsQueued = 256;
  static constexpr unsigned kReceiveBuffers = 1024;        // per ring, at most
  static constexpr unsigned kInitialReceiveBuffers = 32;   // provided when the ring starts
  // A shortage counts when it is at least the kGrowAfterShortages-th, and at least one in
  // kShortageRate, of the receives counted since the last one that counted (the count
  // starts over every kShortageWindow receives), with every buffer of the ring holding
  // bytes. The ring doubles when such shortages have kept coming for kGrowInterval, none
  // more than kGrowInterval after the one before. (Only that gap ends a streak, not a
  // window of receives without a counted shortage: under load most shortages find a
  // buffer just recycled and do not count, and with windows ending streaks the rings
  // stayed at 64-128 buffers at 1,000 connections instead of 256, with twice the
  // shortages.)
  // A receive that finds no buffer reads with a recv instead: at 1,000 connections, 1.75
  // such per proxied GET (64 buffers) cost 21-24 us of CPU per request against 21-22 with
  // 0.03 (512 buffers). Growth follows sustained load, not a burst: the pages of every
  // buffer a ring has ever had stay resident (the kernel hands them out in ring order,
  // and none can be withdrawn). 10,000 connections opened 200 at a time (0.8 s) grew both
  // rings to 256 within a second when the first counted shortage doubled at once, 2 MiB
  // for good (205 B per connection of that burst); later, with doubling at most once a
  // second, to 64 or 128, 512-768 KiB; now they stay at 32.
  static constexpr unsigned kGrowAfterShortages = 16;
  static constexpr unsigned kShortageRate = 16;
  static constexpr unsigned kShortageWindow = 1024;
  static constexpr std::chrono::milliseconds kGrowInterval{1000};
  // A request or response head, or the first piece of a body. Small on purpose: the bytes
  // are copied out of it into the reader's buffer, and a receive that fills it marks the
  // socket as streaming, so the rest of a body is read with plain recvs straight into the
  // reader's buffer (one copy, the kernel's). At 16 KiB, the copy and the 4 MiB of buffers
  // per ring cycling through the cache cost 67-69 us per proxied POST of 16 KiB against
  // 55-60 us at 4 KiB (the epoll driver: 55-59 us); GET 64 KiB 89-92 against 85-86 us;
  // small GETs unchanged (alternating runs, tests/bench/proxy-bench.yaml's 18004).
  static constexpr unsigned kReceiveBufferSize = 4 * 1024;
  // How long a stopping ring lets lingering sends finish before it cancels them.
  static constexpr std::chrono::seconds kShutdownLinger{1};

  // Operations started and not yet completed, and cancels: sent by this ring's worker, and
  // queued to it by other threads (for tests and metrics).
  std::size_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  uint64_t cancels() const { return cancels_.load(std::memory_order_relaxed); }
  uint64_t remote_cancels() const { return remote_cancels_total_.load(std::memory_order_relaxed); }
  // Provided buffers holding received bytes not yet taken, and receives that found every
  // buffer in use (each then reads with a plain recv).
  std::size_t buffers_in_use() const { return buffers_in_use_.load(std::memory_order_relaxed); }
  std::size_t buffers_provided() const { return buffers_provided_.load(std::memory_order_relaxed); }
  uint64_t buffer_shortages() const { return buffer_shortages_.load(std::memory_order_relaxed); }

 private:
  friend void cancel_and_release(UringOp* op) noexcept;
  friend void cancel_and_close(UringOp* op, int fd) noexcept;
  friend void release(UringOp* op) noexcept;
  friend std::span<const char> received_bytes(const UringOp* op) noexcept;
  friend void stop_accepts(UringOp* op) noexcept;
  friend void abandon_send(UringOp* op) noexcept;
  friend void close_after_send(UringOp* send, UringOp* recv, std::string tail) noexcept;
  UringDriver() = default;

  // The kernel holds completions' task work that the ring's next entry runs and posts
  // (IORING_SQ_TASKRUN, with DEFER_TASKRUN and TASKRUN_FLAG).
  bool task_work_pending() const { return (IO_URING_READ_ONCE(*ring_.sq.kflags) & IORING_SQ_TASKRUN) != 0; }
  // An operation (with `extra` bytes after it) that wakes `w` with `tag`, counted in flight.
  UringOp* new_waited_op(std::size_t extra, exec::Waker w, std::size_t tag);
  void setup_buffers();
  void recycle(int buffer);
  // Hands the ring `count` buffers it has never had (ids from buffers_provided_ on). Only
  // from the ring's thread.
  void provide_new_buffers(unsigned count);
  // Counts a completed receive, and grows the ring when shortages are frequent. Only from
  // the ring's thread.
  void count_receive(bool found_no_buffer);
  void drain_remote();

  bool on_ring_thread() const;
  io_uring_sqe* sqe();
  void submit_cancel(UringOp* op);
  void submit_close(int fd);
  // fd >= 0: closed after the cancel (cancel_and_close).
  void queue_remote_cancel(UringOp* op, int fd);
  void arm_wake_read();
  uint32_t reap(uint32_t max_events);
  void complete(UringOp* op, int res, uint32_t flags);
  void complete_accept(UringOp* op, int res, uint32_t flags);
  // A background send's completion: resubmits what a short one (or EAGAIN) left, unless
  // it was abandoned. True when it did (the operation is still in flight).
  bool resend_rest(UringOp* op, int res);
  // close_after_send on this ring's thread: cancels `recv` (this ring's) and lingers
  // `send`, here or, once the cancel has been submitted, on the send's ring
  // (hand_over_lingering). queue_remote_linger: the same from another thread.
  void linger(UringOp* send, UringOp* recv, std::string tail);
  // For a send being closed whose submission is still the last one queued: appends `tail`
  // to its bytes and links the descriptor's close (the FIN) behind it, so the FIN leaves
  // with the send instead of after its completion is reaped. True if it did.
  bool chain_fin(UringOp* send, std::string_view tail);
  void queue_remote_linger(UringOp* send, UringOp* recv, std::string tail);
  // After a submit: the lingering sends of other rings whose socket's receive this ring
  // has just cancelled go to their rings.
  void hand_over_lingering();
  // A lingering send that has finished: its tail, then the descriptor's close.
  void finish_lingering(UringOp* op);
  // Drops the lingering sends that have finished, and cancels those past their deadline.
  void sweep_lingering();
  // Cancels `op` from any thread (without dropping a reference).
  void cancel(UringOp* op);
  void cancel_everything();

  io_uring ring_{};
  bool ring_ready_ = false;
  // The thread that attached first (none yet: default id), the only one that submits to
  // the ring; with SINGLE_ISSUER (DEFER_TASKRUN, see create) the only one the kernel lets.
  bool single_issuer_ = false;
  std::thread::id issuer_{};
  int wake_fd_ = -1;
  uint64_t wake_buf_ = 0;  // the pending eventfd read's target
  std::atomic<bool> wake_pending_{false};
  std::atomic<std::size_t> in_flight_{0};
  std::atomic<uint64_t> cancels_{0};
  std::atomic<uint64_t> remote_cancels_total_{0};

  // The buffer ring shared with the kernel (written by this ring's thread only) and the
  // buffers it hands out.
  io_uring_buf_ring* buf_ring_ = nullptr;
  char* buffers_ = nullptr;
  std::atomic<std::size_t> buffers_in_use_{0};
  // Written by the ring's thread only (the atomic is for the metrics' readers); the
  // buffer ring never holds more entries than this, so it cannot overflow.
  std::atomic<std::size_t> buffers_provided_{0};
  unsigned window_receives_ = 0;   // the ring's thread's, for count_receive()
  unsigned window_shortages_ = 0;
  // The current streak of counted shortages (count_receive): when it began (the epoch:
  // none) and its latest.
  std::chrono::steady_clock::time_point shortages_since_{};
  std::chrono::steady_clock::time_point last_shortage_{};
  std::atomic<uint64_t> buffer_shortages_{0};

  std::mutex remote_mu_;
  struct RemoteCancel {
    UringOp* op;  // holds a reference (or null for a linger without a receive)
    int fd;       // closed after the cancel, or -1
    UringOp* linger_send = nullptr;  // close_after_send: the send the close waits for (a reference)
    std::string tail{};
  };
  std::vector<RemoteCancel> remote_cancels_;  // under remote_mu_
  std::vector<int> remote_recycles_;      // under remote_mu_: buffers freed on other threads
  // The ring thread's side of the swap in drain_remote: emptied, never freed, so that
  // the two pairs of vectors trade capacity instead of allocating per drain.
  std::vector<RemoteCancel> draining_cancels_;
  std::vector<int> draining_recycles_;
  std::atomic<bool> has_remote_{false};
  // Background sends whose socket was closed before they completed (each holds the
  // socket's reference): the ring's thread only.
  std::vector<UringOp*> lingering_;
  // Other rings' lingering sends waiting for this ring's next submit (hand_over_lingering).
  struct HandOver {
    UringOp* send;
    std::string tail;
  };
  std::vector<HandOver> handing_over_;
  std::atomic<bool> shut_down_{false};  // read by threads queueing remote cancels
};

// The io_uring ring of the worker running the calling task (nullptr when the runtime's
// driver is not io_uring, or off the workers).
UringDriver* current_ring() noexcept;

}  // namespace sg::io
