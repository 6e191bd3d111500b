// Bridging Asio completions to executor waits.
//
// WaitHandler is the only completion handler src/io gives Asio. Invoked on the thread
// driving the reactor, it records the result in the waiting task and wakes it (the task
// then runs on a worker); it never runs user code. Destroyed without being invoked (the
// io_context is being destroyed at shutdown), it completes the wait as aborted so the
// waiting task is dropped rather than leaked. Its memory comes from the executor's task
// allocator.
#pragma once

#include <asio/associated_allocator.hpp>
#include <asio/basic_stream_socket.hpp>
#include <asio/basic_waitable_timer.hpp>
#include <asio/error.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <chrono>
#include <coroutine>
#include <cstddef>
#include <optional>
#include <system_error>

#include "exec/alloc.h"
#include "exec/coro.h"
#include "exec/semaphore.h"

namespace sg::io {

using tcp = asio::ip::tcp;
using Executor = asio::io_context::executor_type;
using Socket = asio::basic_stream_socket<tcp, Executor>;
using Acceptor = asio::basic_socket_acceptor<tcp, Executor>;
using SteadyTimer = asio::basic_waitable_timer<std::chrono::steady_clock,
                                               asio::wait_traits<std::chrono::steady_clock>, Executor>;
using Clock = std::chrono::steady_clock;

// An absolute point in time after which a wait fails with errc::timed_out.
struct Deadline {
  Clock::time_point at = Clock::time_point::max();
  static Deadline after(Clock::duration d) { return Deadline{Clock::now() + d}; }
  static Deadline never() { return {}; }
  bool is_set() const { return at != Clock::time_point::max(); }
  bool expired() const { return is_set() && Clock::now() >= at; }
  friend Deadline earliest(Deadline a, Deadline b) { return a.at <= b.at ? a : b; }
};

template <class T>
struct TaskAllocator {
  using value_type = T;
  TaskAllocator() noexcept = default;
  template <class U>
  TaskAllocator(const TaskAllocator<U>&) noexcept {}  // NOLINT
  T* allocate(std::size_t n) { return static_cast<T*>(exec::task_alloc(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { exec::task_free(p, n * sizeof(T)); }
  friend bool operator==(const TaskAllocator&, const TaskAllocator&) noexcept { return true; }
  friend bool operator!=(const TaskAllocator&, const TaskAllocator&) noexcept { return false; }
};

// Tags in WaitResult::value telling which of several raced operations completed.
inline constexpr std::size_t kTagReady = 0;
inline constexpr std::size_t kTagTimer = 1;

class WaitHandler {
 public:
  using allocator_type = TaskAllocator<void>;
  allocator_type get_allocator() const noexcept { return {}; }

  WaitHandler(exec::Waker w, std::size_t tag) noexcept : waker_(std::move(w)), tag_(tag) {}
  WaitHandler(WaitHandler&&) noexcept = default;
  WaitHandler& operator=(WaitHandler&&) noexcept = default;
  ~WaitHandler() {
    if (waker_) std::move(waker_).wake({asio::error::operation_aborted, tag_}, exec::ScheduleKind::kDriver);
  }

  void operator()(const std::error_code& ec) { std::move(waker_).wake({ec, tag_}, exec::ScheduleKind::kDriver); }

 private:
  exec::Waker waker_;
  std::size_t tag_;
};

// Races a wait against `deadline` (if set): the timer completes the same armed wait with
// kTagTimer. Shared by the socket awaiters below.
inline void arm_deadline(std::optional<SteadyTimer>& timer, const Executor& ex, Deadline deadline,
                         const exec::Waker& w) {
  if (!deadline.is_set()) return;
  timer.emplace(ex, deadline.at);
  timer->async_wait(WaitHandler(w.clone(), kTagTimer));
}

// Waits until `sock` is ready for `what` or the deadline passes; yields the error (or
// errc::timed_out). A losing operation is left to complete on its own: its handler finds
// the wait already taken and only drops its reference; the timer is cancelled when the
// awaiter goes away.
template <class S>
struct ReadyAwaiter {
  S& sock;
  asio::socket_base::wait_type what;
  Deadline deadline;
  std::optional<SteadyTimer> timer;

  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) {
    exec::Waker w = exec::arm_wait(h);
    arm_deadline(timer, sock.get_executor(), deadline, w);
    sock.async_wait(what, WaitHandler(std::move(w), kTagReady));
  }
  std::error_code await_resume() {
    const exec::WaitResult& r = exec::last_wait_result();
    if (r.value == kTagTimer && r.code == 0) return std::make_error_code(std::errc::timed_out);
    if (timer) timer->cancel();
    return r.ec();
  }
};

template <class S>
ReadyAwaiter<S> wait_ready(S& sock, asio::socket_base::wait_type what, Deadline dl) {
  return ReadyAwaiter<S>{sock, what, dl, std::nullopt};
}

// Waits until `a` or `b` (when given) is readable, or the deadline passes. Yields 0 or 1
// for which socket became ready, or an error (errc::timed_out at the deadline).
struct EitherReadable {
  int which = -1;
  std::error_code ec;
};

template <class S>
struct EitherAwaiter {
  S& a;
  S* b;  // nullptr: wait for `a` alone
  Deadline deadline;
  std::optional<SteadyTimer> timer;

  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) {
    exec::Waker w = exec::arm_wait(h);
    arm_deadline(timer, a.get_executor(), deadline, w);
    if (b != nullptr) b->async_wait(asio::socket_base::wait_read, WaitHandler(w.clone(), kTagReady + 2));
    a.async_wait(asio::socket_base::wait_read, WaitHandler(std::move(w), kTagReady));
  }
  EitherReadable await_resume() {
    const exec::WaitResult& r = exec::last_wait_result();
    if (timer) timer->cancel();
    if (r.value == kTagTimer) {
      return {-1, r.code == 0 ? std::make_error_code(std::errc::timed_out) : r.ec()};
    }
    if (r.code != 0) return {-1, r.ec()};
    return {r.value == kTagReady ? 0 : 1, {}};
  }
};

// A timer as an exec::WaitTimeout (bounds a Semaphore wait).
class DeadlineTimeout final : public exec::WaitTimeout {
 public:
  DeadlineTimeout(asio::io_context& ctx, Deadline dl) : timer_(ctx.get_executor(), dl.at) {}
  void arm(exec::Waker w) override { timer_.async_wait(WaitHandler(std::move(w), kTagTimer)); }
  void cancel() override { timer_.cancel(); }

 private:
  SteadyTimer timer_;
};

// co_await sleep_until(reactor_context, t)
struct SleepAwaiter {
  SteadyTimer timer;
  bool await_ready() const noexcept { return timer.expiry() <= Clock::now() && exec::coop_proceed(); }
  void await_suspend(std::coroutine_handle<> h) { timer.async_wait(WaitHandler(exec::arm_wait(h), kTagTimer)); }
  void await_resume() const noexcept {}
};

}  // namespace sg::io
