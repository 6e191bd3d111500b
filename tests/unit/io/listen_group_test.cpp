// A listener's group of listening sockets (io::listen_group), one per worker with
// SO_REUSEPORT: `exclusive_address` (what `reuse_port: auto` asks for) binds only an
// address nobody holds, yet its first socket still joins the group its siblings share,
// and an inherited socket without SO_REUSEPORT stays alone without a note.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "io/inherited.h"
#include "io/runtime.h"
#include "../../support/io_drivers.h"
#include "../../support/loopback.h"
#include "../../support/workers.h"

namespace sg::io {
namespace {

using sg::testing::connect_loopback;
using sg::testing::workers;

class ListenGroup : public ::testing::TestWithParam<IoDriverKind> {};
INSTANTIATE_TEST_SUITE_P(Drivers, ListenGroup, sg::testing::kDrivers, sg::testing::driver_test_name);

tcp::endpoint loopback(unsigned short port) { return {asio::ip::make_address("127.0.0.1"), port}; }

ListenOptions group_options(bool exclusive) {
  ListenOptions o;
  o.reuse_port = true;
  o.exclusive_address = exclusive;
  return o;
}

// A listening socket as another process with `reuse_port: true` would hold it.
int shared_socket_on(unsigned short port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  const tcp::endpoint ep = loopback(port);
  if (::bind(fd, static_cast<const sockaddr*>(ep.data()), static_cast<socklen_t>(ep.size())) != 0 ||
      ::listen(fd, 16) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Connections waiting in `fd`'s accept queue, each accepted (and closed) to count it.
int drain_accept_queue(int fd) {
  int n = 0;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) != 1) return n;
    int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return n;
    ::close(c);
    ++n;
  }
}

TEST_P(ListenGroup, AnExclusiveGroupTakesAFreeAddressAndItsFirstSocketSharesTheConnections) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  ListeningGroup g = listen_group(rt.context(), nullptr, "a", loopback(0), group_options(true), 2);
  ASSERT_EQ(g.listeners.size(), 2u) << g.error << g.note;
  EXPECT_TRUE(g.note.empty()) << g.note;
  const unsigned short port = g.listeners[0].local_endpoint().port();
  EXPECT_EQ(g.listeners[1].local_endpoint().port(), port);

  // The first socket got SO_REUSEPORT only after its bind; it is in the group all the same:
  // the kernel hashes new connections over both (all 64 on one: 1 in 2^63).
  std::vector<int> clients;
  for (int i = 0; i < 64; ++i) clients.push_back(connect_loopback(port));
  const int first = drain_accept_queue(g.listeners[0].native_handle());
  const int second = drain_accept_queue(g.listeners[1].native_handle());
  EXPECT_EQ(first + second, 64);
  EXPECT_GT(first, 0);
  EXPECT_GT(second, 0);
  for (int c : clients) ::close(c);
}

TEST_P(ListenGroup, AnExclusiveGroupRefusesAnAddressAnotherGroupHolds) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  ListeningGroup held = listen_group(rt.context(), nullptr, "a", loopback(0), group_options(true), 2);
  ASSERT_EQ(held.listeners.size(), 2u) << held.error << held.note;
  const unsigned short port = held.listeners[0].local_endpoint().port();
  // A second stealgate on the address fails as it would without reuse_port...
  ListeningGroup second = listen_group(rt.context(), nullptr, "b", loopback(port), group_options(true), 2);
  EXPECT_TRUE(second.listeners.empty());
  EXPECT_NE(second.error.find("Address already in use"), std::string::npos) << second.error;
  // ...also beside a socket of another process's `reuse_port: true` group...
  held.listeners.clear();
  const int other = shared_socket_on(port);
  ASSERT_GE(other, 0);
  ListeningGroup beside = listen_group(rt.context(), nullptr, "c", loopback(port), group_options(true), 2);
  EXPECT_TRUE(beside.listeners.empty());
  EXPECT_NE(beside.error.find("Address already in use"), std::string::npos) << beside.error;
  // ...which an explicit `reuse_port: true` joins, as documented.
  ListeningGroup joined = listen_group(rt.context(), nullptr, "d", loopback(port), group_options(false), 2);
  EXPECT_EQ(joined.listeners.size(), 2u) << joined.error << joined.note;
  ::close(other);
}

TEST_P(ListenGroup, AnInheritedSocketWithoutReusePortIsTheWholeGroupAndOnlyAnExplicitGroupSaysSo) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  for (bool exclusive : {true, false}) {
    // Socket activation's default: one socket, no SO_REUSEPORT, at a descriptor of its own.
    auto plain = TcpListener::bind(rt.context(), loopback(0), {});
    ASSERT_TRUE(plain.ok());
    const unsigned short port = plain->local_endpoint().port();
    constexpr int kFd = 700;
    ASSERT_EQ(::dup2(plain->native_handle(), kFd), kFd);
    plain->close();
    InheritedSockets inherited;
    ASSERT_EQ(inherited.adopt(kFd, 1, {"public"}), "");
    ListeningGroup g = listen_group(rt.context(), &inherited, "public", loopback(port), group_options(exclusive), 2);
    ASSERT_EQ(g.listeners.size(), 1u) << g.error;
    EXPECT_TRUE(g.inherited);
    if (exclusive) {
      EXPECT_EQ(g.note, "");
    } else {
      EXPECT_NE(g.note.find("cannot bind another socket beside it"), std::string::npos) << g.note;
    }
  }
}

}  // namespace
}  // namespace sg::io
