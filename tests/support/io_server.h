// The server side of the I/O tests' loopback connections: a listener on 127.0.0.1 and the
// idle wait of a keep-alive connection.
#pragma once

#include <gtest/gtest.h>

#include <coroutine>
#include <utility>

#include "io/runtime.h"
#include "io/stream.h"
#include "io/tcp.h"

namespace sg::testing {

// A listener on 127.0.0.1, on a port the kernel picks.
inline io::TcpListener bind_loopback(io::Runtime& rt) {
  auto l = io::TcpListener::bind(rt.context(), io::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), {});
  EXPECT_TRUE(l.ok());
  return std::move(*l);
}

// Awaits the idle wait of a keep-alive connection (Stream::wait_readable into a
// ReadableWait), armed with the task's Waker as a BurstTask arms it between bursts: true
// once readable, false at the deadline.
struct IdleWait {
  io::Stream& s;
  io::Deadline dl;
  io::ReadableWait wait{};
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) { s.wait_readable(wait, dl, exec::arm_wait(h)); }
  bool await_resume() { return wait.finish(exec::last_wait_result()); }
};

}  // namespace sg::testing
