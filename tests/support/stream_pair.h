// Streams on socket pairs for the I/O tests, and bytes to send through them.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <utility>

#include "io/runtime.h"
#include "io/tcp.h"

namespace sg::testing {

// `n` bytes of a pattern that `seed` shifts, so that what arrives can be checked (order
// included) against what was sent.
inline std::string pattern(std::size_t n, int seed) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + static_cast<std::size_t>(seed)) % 26);
  return s;
}

// A stream on one end of a non-blocking AF_UNIX socket pair, on `rt`'s driver, and the
// other end's descriptor (the test thread's, also non-blocking; the test closes it).
struct StreamPair {
  int peer = -1;
  io::TcpStream stream;
};

inline StreamPair stream_pair(io::Runtime& rt) {
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  auto s = io::Socket::adopt(rt.context(), sv[0]);
  return StreamPair{sv[1], io::TcpStream(std::move(s))};
}

// What the peer `fd` (non-blocking) receives: up to `n` bytes (no more are taken), until
// EOF or `limit`. `eof`, when given, says whether EOF came.
inline std::string read_peer(int fd, std::size_t n, std::chrono::milliseconds limit, bool* eof = nullptr) {
  std::string got;
  if (eof != nullptr) *eof = false;
  const auto until = std::chrono::steady_clock::now() + limit;
  while (got.size() < n && std::chrono::steady_clock::now() < until) {
    char buf[65536];
    const ssize_t k = ::recv(fd, buf, std::min(sizeof(buf), n - got.size()), MSG_DONTWAIT);
    if (k > 0) {
      got.append(buf, static_cast<std::size_t>(k));
    } else if (k == 0) {
      if (eof != nullptr) *eof = true;
      break;
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  return got;
}

}  // namespace sg::testing
