// Moving bytes between two TCP streams by splice (io/splice.h), on both drivers: exactly n
// bytes follow the prefix and what comes after them stays in the source; a body far
// bigger than the pipe and the socket buffers arrives whole; a source that closes early or
// stays silent fails as the source (a silent one after the window update was pushed), a
// sink that stops reading as the sink; a transfer dropped with bytes in its pipe leaves
// none for the next transfer (its pipe is closed, not pooled); bytes an io_uring receive
// already took make splicing unavailable.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "io/runtime.h"
#include "io/splice.h"
#include "io/tcp.h"
#include "../../support/eventually.h"
#include "../../support/io_drivers.h"
#include "../../support/loopback.h"
#include "../../support/stream_pair.h"
#include "../../support/workers.h"

namespace sg::io {
namespace {

using namespace std::chrono_literals;
using sg::testing::pattern;
using sg::testing::read_peer;
using sg::testing::workers;
using Failed = SpliceResult::Failed;

class Splice : public ::testing::TestWithParam<IoDriverKind> {};
INSTANTIATE_TEST_SUITE_P(Drivers, Splice, sg::testing::kDrivers, sg::testing::driver_test_name);

// A loopback TCP connection: `stream` on the runtime's driver, `peer` the test's blocking end.
struct TcpPair {
  int peer = -1;
  TcpStream stream;
};

TcpPair tcp_pair(Runtime& rt) {
  const int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  EXPECT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(::listen(l, 1), 0);
  EXPECT_EQ(::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int peer = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_EQ(::connect(peer, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  const int mine = ::accept4(l, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  ::close(l);
  auto s = Socket::adopt(rt.context(), mine);
  return TcpPair{peer, TcpStream(std::move(s))};
}

void send_all(int fd, const std::string& s) {
  for (std::size_t off = 0; off < s.size();) {
    const ssize_t k = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (k <= 0) return;
    off += static_cast<std::size_t>(k);
  }
}

struct Outcome {
  SpliceResult r;
  int source_done = 0;
};

exec::Task<Outcome> run_splice(TcpStream& from, TcpStream& to, std::string_view prefix, uint64_t n,
                               SpliceTimeouts t = {5s, 5s}) {
  Outcome o;
  std::string_view pre[] = {prefix};
  o.r = co_await splice_exact(from, to, std::span<const std::string_view>(pre, prefix.empty() ? 0 : 1), n, t,
                              [&o] { ++o.source_done; });
  co_return o;
}

TEST_P(Splice, MovesExactlyNBytesAfterThePrefixAndLeavesWhatFollows) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  TcpPair src = tcp_pair(rt), dst = tcp_pair(rt);
  // 3 MiB: many rounds through the 128 KiB pipe, with the sink's buffer full in between.
  const std::string body = pattern(3'000'000, 1);
  std::thread sender([&] { send_all(src.peer, body + "NEXT"); });
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    Outcome o = co_await run_splice(src.stream, dst.stream, "HEAD", body.size());
    if (o.r.failed != Failed::kNone) co_return "failed: " + o.r.ec.message();
    if (o.source_done != 1 || !o.r.prefix_sent || o.r.moved != body.size()) co_return "wrong outcome";
    char buf[16];
    IoResult r = co_await src.stream.read_some(buf, Deadline::after(5s));
    co_return std::string(buf, r.n);
  });
  std::string got = read_peer(dst.peer, 4 + body.size(), 20s);
  sender.join();
  EXPECT_EQ(h.wait(), "NEXT");
  ASSERT_EQ(got.size(), 4 + body.size());
  EXPECT_TRUE(got == "HEAD" + body) << "the sink received other bytes than were sent";
  ::close(src.peer);
  ::close(dst.peer);
}

TEST_P(Splice, ASourceThatClosesEarlyFailsAsTheSource) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  TcpPair src = tcp_pair(rt), dst = tcp_pair(rt);
  send_all(src.peer, pattern(1000, 2));
  ::shutdown(src.peer, SHUT_WR);
  auto h = rt.spawn([&]() -> exec::Task<Outcome> { co_return co_await run_splice(src.stream, dst.stream, "", 5000); });
  std::optional<Outcome> o = h.wait();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->r.failed, Failed::kSource);
  EXPECT_FALSE(o->r.ec);  // EOF
  EXPECT_EQ(o->r.moved, 1000u);
  EXPECT_EQ(o->source_done, 0);
  EXPECT_EQ(read_peer(dst.peer, 1000, 2s), pattern(1000, 2));
  ::close(src.peer);
  ::close(dst.peer);
}

TEST_P(Splice, ASilentSourceTimesOutAsTheSource) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  TcpPair src = tcp_pair(rt), dst = tcp_pair(rt);
  send_all(src.peer, "abc");
  sg::testing::delay_acks(src.stream.native_handle());
  ASSERT_EQ(sg::testing::delays_acks(src.stream.native_handle()), true);
  auto h = rt.spawn(
      [&]() -> exec::Task<Outcome> { co_return co_await run_splice(src.stream, dst.stream, "", 100, {50ms, 5s}); });
  std::optional<Outcome> o = h.wait();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->r.failed, Failed::kSource);
  EXPECT_EQ(o->r.ec, std::errc::timed_out);
  // Before waiting for the rest, the window update went out (io::push_window_update).
  EXPECT_EQ(sg::testing::delays_acks(src.stream.native_handle()), false);
  EXPECT_EQ(read_peer(dst.peer, 3, 2s), "abc");  // what came before the silence went out
  ::close(src.peer);
  ::close(dst.peer);
}

TEST_P(Splice, ASinkThatStopsReadingTimesOutAsTheSink) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  TcpPair src = tcp_pair(rt), dst = tcp_pair(rt);
  const int small = 64 * 1024;  // fixed: 8 MB cannot all fit in the sink's buffers
  ASSERT_EQ(::setsockopt(dst.peer, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
  ASSERT_EQ(::setsockopt(dst.stream.native_handle(), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
  const std::string body = pattern(8'000'000, 3);
  std::thread sender([&] { send_all(src.peer, body); });
  auto h = rt.spawn([&]() -> exec::Task<Outcome> {
    co_return co_await run_splice(src.stream, dst.stream, "", body.size(), {5s, 100ms});
  });
  std::optional<Outcome> o = h.wait();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->r.failed, Failed::kSink);
  EXPECT_EQ(o->r.ec, std::errc::timed_out);
  EXPECT_LT(o->r.moved, body.size());
  ::close(dst.peer);
  ::shutdown(src.peer, SHUT_RDWR);  // unblocks the sender
  sender.join();
  ::close(src.peer);
}

TEST_P(Splice, ATransferDroppedWithBytesInItsPipeLeavesNoneForTheNext) {
  // One worker: the second transfer takes its pipe from the same thread's pool.
  SG_DRIVER_RUNTIME(rt, workers(1));
  TcpPair src = tcp_pair(rt), dst = tcp_pair(rt);
  // Fixed small buffers on the sink (no autotuning): 4 MB cannot all fit in them.
  const int small = 64 * 1024;
  ASSERT_EQ(::setsockopt(dst.peer, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
  ASSERT_EQ(::setsockopt(dst.stream.native_handle(), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
  const std::string stale = pattern(4'000'000, 4);
  std::thread sender([&] { send_all(src.peer, stale); });
  std::atomic<bool> started{false};
  auto h = rt.spawn([&]() -> exec::Task<Outcome> {
    started = true;
    co_return co_await run_splice(src.stream, dst.stream, "", stale.size());
  });
  ASSERT_TRUE(sg::testing::eventually([&] { return started.load(); }));
  std::this_thread::sleep_for(50ms);  // the sink is not read: its buffer and the pipe fill
  h.cancel();
  EXPECT_FALSE(h.wait());
  ::shutdown(src.peer, SHUT_RDWR);
  sender.join();

  TcpPair src2 = tcp_pair(rt), dst2 = tcp_pair(rt);
  const std::string fresh = pattern(50'000, 5);
  send_all(src2.peer, fresh);
  auto h2 = rt.spawn([&]() -> exec::Task<Outcome> { co_return co_await run_splice(src2.stream, dst2.stream, "", fresh.size()); });
  std::optional<Outcome> o = h2.wait();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->r.failed, Failed::kNone);
  EXPECT_TRUE(read_peer(dst2.peer, fresh.size() + 1, 1s) == fresh) << "bytes of the dropped transfer came out";
  for (int fd : {src.peer, dst.peer, src2.peer, dst2.peer}) ::close(fd);
}

TEST_P(Splice, BytesAReceiveAlreadyTookMakeSplicingUnavailable) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  TcpPair src = tcp_pair(rt), dst = tcp_pair(rt);
  send_all(src.peer, "taken");
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    // On io_uring the wait's receive takes the bytes into a ring buffer; on epoll they
    // stay in the socket and splicing goes ahead.
    EitherReadable w = co_await src.stream.wait_readable(nullptr, Deadline::after(5s));
    if (w.ec) co_return "wait: " + w.ec.message();
    Outcome o = co_await run_splice(src.stream, dst.stream, "HEAD", 5);
    co_return o.r.failed == Failed::kUnavailable ? "unavailable" : o.r.failed == Failed::kNone ? "moved" : "failed";
  });
  const bool uring = sg::testing::uses_io_uring(rt);
  EXPECT_EQ(h.wait(), uring ? "unavailable" : "moved");
  // Unavailable means nothing written, not even the prefix.
  EXPECT_EQ(read_peer(dst.peer, 9, 300ms), uring ? "" : "HEADtaken");
  ::close(src.peer);
  ::close(dst.peer);
}

}  // namespace
}  // namespace sg::io
