// A blocking client socket for tests: the test's side of a loopback connection, made
// outside the runtime under test.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <optional>

namespace sg::testing {

// Connects to 127.0.0.1:port; reads time out after 5 s so a broken server fails the test
// instead of hanging it. -1 on failure.
inline int connect_loopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// The local port of the client socket `fd` (what the server sees as its peer's port); 0
// when the socket cannot say.
inline uint16_t local_port(int fd) {
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return 0;
  return ntohs(local.sin_port);
}

// Whether `fd` is in the kernel's delayed-ACK ("pingpong") mode, where draining the socket
// does not send the window update a stalled sender waits for: getsockopt(TCP_QUICKACK)
// reads 0 then. setsockopt(TCP_QUICKACK, 0) enters the mode; io::push_window_update leaves it.
// nullopt when the socket cannot say (closed, not TCP): no answer to pass a check with.
inline std::optional<bool> delays_acks(int fd) {
  int v = -1;
  socklen_t len = sizeof(v);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &v, &len) != 0) return std::nullopt;
  return v == 0;
}

inline void delay_acks(int fd) {
  const int zero = 0;
  ::setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &zero, sizeof(zero));
}

}  // namespace sg::testing
