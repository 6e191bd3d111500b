// Socket readiness waits and deadlines, on either I/O driver.
//
// ReadyWait is the one way src/io waits for a socket. On the epoll driver it is a
// readiness operation queued on Asio's reactor (io/reactor_fd.h), which wakes the waiting
// task (the task then runs on a worker) and never runs user code; dropped at shutdown, it
// completes the wait as aborted so the waiting task is dropped rather than leaked. On
// io_uring it is a poll operation on the waiting worker's ring (io/uring.h). Deadlines
// never go through Asio's timer queue: they are entries on the executor's timing wheels
// (exec/timers.h), fired by the driver's holder.
#pragma once

#include <chrono>
#include <coroutine>
#include <cstddef>
#include <optional>
#include <system_error>

#include "exec/coro.h"
#include "exec/semaphore.h"
#include "exec/timers.h"
#include "io/socket.h"

namespace sg::io {

using Clock = exec::Clock;
struct UringOp;

// An absolute point in time after which a wait fails with errc::timed_out. Measured on
// the clock read once per task poll (exec::tick_now).
struct Deadline {
  Clock::time_point at = Clock::time_point::max();
  static Deadline after(Clock::duration d) { return Deadline{exec::tick_now() + d}; }
  static Deadline never() { return {}; }
  bool is_set() const { return at != Clock::time_point::max(); }
  bool expired() const { return is_set() && exec::tick_now() >= at; }
  friend Deadline earliest(Deadline a, Deadline b) { return a.at <= b.at ? a : b; }
};

// Tags in WaitResult::value telling which of several raced operations completed.
inline constexpr std::size_t kTagReady = 0;
inline constexpr std::size_t kTagTimer = 1;

// Whether a wait's task reads (or writes) the socket once woken (kIo), or only looks at it
// (kWatch: a client watched for a close while its request is served elsewhere). On epoll a
// watch's wake leaves the socket's readiness for its reader (io/reactor_fd.h).
enum class WaitRole : uint8_t { kIo, kWatch };

// Races a wait against `deadline` (if set): the timer completes the same armed wait with
// kTagTimer; a deadline already due completes it at once. Shared by the awaiters below.
inline void arm_deadline(exec::TimerEntry& timer, Deadline deadline, exec::Waker t) {
  if (!deadline.is_set()) return;
  exec::Timers* timers = exec::current_timers();
  if (timers != nullptr && timer.arm(*timers, deadline.at, t, kTagTimer)) return;
  std::move(t).wake({std::error_code{}, kTagTimer}, exec::ScheduleKind::kDriver);
}

// One readiness wait on a socket: start() completes `w`'s wait with `tag` once the socket
// is ready for `what` (readable also means EOF or an error), or with the error. cancel()
// (and the destructor) stops a wait that lost a race (its deadline, or the other socket of
// an EitherAwaiter): on io_uring the poll is cancelled on the ring it was started on; on
// epoll the wait stays queued until the socket is ready or closed, and then finds the
// wait taken (exec::Waker's generation).
class ReadyWait {
 public:
  ReadyWait() = default;
  ReadyWait(const ReadyWait&) = delete;
  ReadyWait& operator=(const ReadyWait&) = delete;
  ~ReadyWait() { cancel(); }

  void start(Socket& s, Interest what, exec::Waker w, std::size_t tag, WaitRole role = WaitRole::kIo);
  void cancel() noexcept;

 private:
  UringOp* op_ = nullptr;  // io_uring: the pending poll (our reference)
};

// A readable wait on a stream that, on io_uring, is the socket's receive (Socket::
// receive_op): start() starts it, or re-arms the one a previous wait left running, or wakes
// at once when it has completed; stop() (and the destructor) only disarms it, so what it
// receives stays for the next read. On epoll, and on a ring without provided buffers, it is
// a ReadyWait for readability.
class ReceiveWait {
 public:
  ReceiveWait() = default;
  ReceiveWait(const ReceiveWait&) = delete;
  ReceiveWait& operator=(const ReceiveWait&) = delete;
  ~ReceiveWait() { stop(); }

  void start(Socket& s, exec::Waker w, std::size_t tag, WaitRole role = WaitRole::kIo);
  void stop() noexcept;

 private:
  ReadyWait poll_;
  UringOp* op_ = nullptr;  // the receive this wait armed (our reference)
};

// Waits until `sock` is ready for `what` or the deadline passes; yields the error (or
// errc::timed_out). The losing side is cancelled on resume (and by the destructors when
// the task is dropped while waiting).
struct ReadyAwaiter {
  Socket& sock;
  Interest what;
  Deadline deadline;
  exec::TimerEntry timer{};
  ReadyWait wait{};

  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) {
    exec::Waker w = exec::arm_wait(h);
    if (deadline.is_set()) arm_deadline(timer, deadline, w.clone());
    wait.start(sock, what, std::move(w), kTagReady);
  }
  std::error_code await_resume() {
    const exec::WaitResult r = exec::last_wait_result();
    timer.cancel();
    wait.cancel();
    if (r.value == kTagTimer && r.code == 0) return std::make_error_code(std::errc::timed_out);
    return r.ec();
  }
};

inline ReadyAwaiter wait_ready(Socket& sock, Interest what, Deadline dl) { return ReadyAwaiter{sock, what, dl}; }

// A readable wait with a deadline, armed with a given Waker: start() completes `w` with
// kTagReady once `sock` is readable (its receive: data, EOF or an error to read, which the
// socket keeps for the next read), or with kTagTimer at the deadline. finish() stops what
// lost the race and says whether the socket became readable; stop() (and the destructor)
// stops both. EitherAwaiter's wait for its first socket, and the wait of an idle keep-alive
// connection, which lives in its task between bursts (exec/burst_task.h), where no
// coroutine frame is.
class ReadableWait {
 public:
  ReadableWait() = default;
  ReadableWait(const ReadableWait&) = delete;
  ReadableWait& operator=(const ReadableWait&) = delete;
  ~ReadableWait() { stop(); }

  void start(Socket& sock, const Deadline& dl, exec::Waker w) {
    if (dl.is_set()) arm_deadline(timer_, dl, w.clone());
    wait_.start(sock, std::move(w), kTagReady);
  }
  bool finish(const exec::WaitResult& r) noexcept {
    stop();
    return r.value == kTagReady && r.code == 0;
  }
  void stop() noexcept {
    timer_.cancel();
    wait_.stop();
  }

 private:
  exec::TimerEntry timer_;
  ReceiveWait wait_;
};

// Waits until `a` or `b` (when given) is readable, or the deadline passes. Yields 0 or 1
// for which socket became ready, or an error (errc::timed_out at the deadline). Each wait
// is its socket's receive (ReceiveWait: on io_uring the bytes are then in the socket, for
// the read that follows, and nothing is lost). Watching `b` (a client while its request's
// upstream answers) therefore starts the receive that b's next read waits on anyway: a
// poll instead cost a submission, its cancel and two completions per proxied request.
struct EitherReadable {
  int which = -1;
  std::error_code ec;
};

struct EitherAwaiter {
  Socket& a;
  Socket* b;  // nullptr: wait for `a` alone
  Deadline deadline;
  bool ready_now = false;  // `a` is readable already (plaintext held by TLS): no wait
  ReadableWait wait_a{};    // with the deadline
  ReceiveWait wait_b{};

  bool await_ready() const noexcept { return ready_now; }
  void await_suspend(std::coroutine_handle<> h) {
    exec::Waker w = exec::arm_wait(h);
    if (b != nullptr) wait_b.start(*b, w.clone(), kTagReady + 2, WaitRole::kWatch);
    wait_a.start(a, deadline, std::move(w));
  }
  EitherReadable await_resume() {
    if (ready_now) return {0, {}};
    const exec::WaitResult r = exec::last_wait_result();
    wait_a.stop();
    wait_b.stop();
    if (r.value == kTagTimer) {
      return {-1, r.code == 0 ? std::make_error_code(std::errc::timed_out) : r.ec()};
    }
    if (r.code != 0) return {-1, r.ec()};
    return {r.value == kTagReady ? 0 : 1, {}};
  }
};

// A deadline as an exec::WaitTimeout (bounds a Semaphore wait).
class DeadlineTimeout final : public exec::WaitTimeout {
 public:
  explicit DeadlineTimeout(Deadline dl) : dl_(dl) {}
  void arm(exec::Waker w) override { arm_deadline(timer_, dl_, std::move(w)); }
  void cancel() override { timer_.cancel(); }

 private:
  Deadline dl_;
  exec::TimerEntry timer_;
};

}  // namespace sg::io
