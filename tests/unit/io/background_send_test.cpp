// Writes that do not wait for their send (io_uring: a write under 8 KiB returns once its
// send is queued; the next write, flush() or close() settles it). On both drivers, the
// same guarantees: a socket closed right after its writes delivers every byte, then EOF
// (io_uring: the ring closes it when the send has finished, from a worker or from another
// thread); a write to a peer that stopped reading, then a close, gives up at the write's
// deadline and closes; a failed send is reported by the next write and by flush();
// writes_done() says whether a connection may go back to a pool. On one ring: a close
// right after a write sends the FIN (and a TLS close_notify) with the write's send. A
// stress test (run under ThreadSanitizer too) has tasks that move between workers write,
// read and close.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "io/runtime.h"
#include "io/tcp.h"
#include "io/uring.h"
#include "../../support/eventually.h"
#include "../../support/io_drivers.h"
#include "../../support/stream_pair.h"
#include "../../support/workers.h"

namespace sg::io::background_send_test {
namespace {

using namespace std::chrono_literals;
using sg::testing::pattern;
using sg::testing::ring_ops_in_flight;
using sg::testing::stream_pair;
using sg::testing::StreamPair;
using sg::testing::uses_io_uring;
using sg::testing::workers;

class BackgroundSend : public ::testing::TestWithParam<IoDriverKind> {};
INSTANTIATE_TEST_SUITE_P(Drivers, BackgroundSend, sg::testing::kDrivers, sg::testing::driver_test_name);

// Everything the peer gets until EOF; `eof` says whether EOF came within `limit`.
std::string read_to_eof(int fd, std::chrono::milliseconds limit, bool& eof) {
  return sg::testing::read_peer(fd, std::string::npos, limit, &eof);
}

// Small writes (sends in the background on io_uring) of all of `data`.
exec::Task<std::string> write_in_pieces(TcpStream& s, const std::string& data, std::size_t piece, Deadline dl) {
  for (std::size_t off = 0; off < data.size(); off += piece) {
    if (std::error_code ec = co_await s.write_all(std::string_view(data).substr(off, piece), dl)) co_return ec.message();
  }
  co_return "ok";
}

TEST_P(BackgroundSend, ACloseRightAfterTheWritesDeliversEveryByteThenEof) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  StreamPair p = stream_pair(rt);
  // 3 MB to a peer that starts reading 100 ms later: the last send is still running (the
  // socket's buffer is full) when the task closes the socket.
  const std::string all = pattern(3'000'000, 1);
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    std::string r = co_await write_in_pieces(p.stream, all, 6000, Deadline::after(20s));
    p.stream.close();
    co_return r;
  });
  std::this_thread::sleep_for(100ms);
  bool eof = false;
  const std::string got = read_to_eof(p.peer, 20s, eof);
  EXPECT_EQ(h.wait(), "ok");
  EXPECT_TRUE(eof) << "the socket was never closed";
  ASSERT_EQ(got.size(), all.size());
  EXPECT_TRUE(got == all) << "the bytes arrived out of order or changed";
  EXPECT_TRUE(sg::testing::eventually([&] { return ring_ops_in_flight(rt) == 0; }));
  ::close(p.peer);
}

TEST_P(BackgroundSend, ACloseOffTheWorkersWaitsForTheSendToo) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  StreamPair p = stream_pair(rt);
  const std::string all = pattern(2'000'000, 2);
  // A slow reader, so that the last send is most likely still running when the test
  // thread closes the socket (io_uring: the close goes to the send's ring).
  std::string got;
  bool eof = false;
  std::atomic<bool> go_on{true};
  std::thread reader([&] {
    while (go_on && got.size() < all.size()) {
      char buf[8192];
      const ssize_t k = ::recv(p.peer, buf, sizeof(buf), MSG_DONTWAIT);
      if (k > 0) got.append(buf, static_cast<std::size_t>(k));
      std::this_thread::sleep_for(200us);
    }
  });
  auto h = rt.spawn([&]() -> exec::Task<std::string> { co_return co_await write_in_pieces(p.stream, all, 7000, Deadline::after(20s)); });
  EXPECT_EQ(h.wait(), "ok");
  p.stream.close();
  go_on = false;
  reader.join();
  got += read_to_eof(p.peer, 20s, eof);
  EXPECT_TRUE(eof) << "the socket was never closed";
  ASSERT_EQ(got.size(), all.size());
  EXPECT_TRUE(got == all) << "the bytes arrived out of order or changed";
  EXPECT_TRUE(sg::testing::eventually([&] { return ring_ops_in_flight(rt) == 0; }));
  ::close(p.peer);
}

TEST_P(BackgroundSend, AReceiveOnOneWorkerAndASendOnAnotherBothPrecedeTheClose) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  StreamPair p = stream_pair(rt);
  // Worker 0 leaves a receive running (a wait that timed out), worker 1 writes and closes
  // at once: on io_uring two rings, and the close must come after both submissions.
  auto waited = rt.handle().spawn_pinned(0, [&]() -> exec::Task<bool> {
    EitherReadable w = co_await p.stream.wait_readable(nullptr, Deadline::after(20ms));
    co_return w.ec == std::errc::timed_out;
  });
  EXPECT_EQ(waited.wait(), std::optional<bool>(true));
  const std::string reply = pattern(3000, 4);
  auto wrote = rt.handle().spawn_pinned(1, [&]() -> exec::Task<std::string> {
    std::error_code ec = co_await p.stream.write_all(reply, Deadline::after(5s));
    p.stream.close();
    co_return ec ? ec.message() : "ok";
  });
  EXPECT_EQ(wrote.wait(), "ok");
  bool eof = false;
  EXPECT_EQ(read_to_eof(p.peer, 5s, eof), reply);
  EXPECT_TRUE(eof) << "the socket was never closed";
  EXPECT_TRUE(sg::testing::eventually([&] { return ring_ops_in_flight(rt) == 0; }));
  ::close(p.peer);
}

TEST_P(BackgroundSend, AClosedSocketWhosePeerNeverReadsClosesAtTheWritesDeadline) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  StreamPair p = stream_pair(rt);
  const std::string big = pattern(1'000'000, 3);
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    // Fill the socket's buffer (a big write that times out), then a small write (on
    // io_uring a send that cannot go out) and the close; the peer reads nothing.
    if (co_await p.stream.write_all(big, Deadline::after(100ms)) != std::errc::timed_out) co_return "the buffer never filled";
    std::error_code ec = co_await p.stream.write_all("last", Deadline::after(400ms));
    if (uses_io_uring(rt) && ec) co_return "the small write waited: " + ec.message();
    p.stream.close();
    co_return "ok";
  });
  EXPECT_EQ(h.wait(), "ok");
  const auto t0 = std::chrono::steady_clock::now();
  // The descriptor closes (the peer's poll sees the hang-up) without the peer reading a
  // byte: at the write's deadline the lingering send is given up.
  auto hung_up = [&] {
    pollfd pfd{p.peer, POLLRDHUP, 0};
    return ::poll(&pfd, 1, 0) == 1 && (pfd.revents & (POLLRDHUP | POLLHUP)) != 0;
  };
  EXPECT_TRUE(sg::testing::eventually(hung_up, 5s));
  const auto took = std::chrono::steady_clock::now() - t0;
  if (uses_io_uring(rt)) {
    EXPECT_GE(took, 250ms) << "closed before the send's deadline";
  }
  EXPECT_LT(took, 3s);
  EXPECT_TRUE(sg::testing::eventually([&] { return ring_ops_in_flight(rt) == 0; }));
  ::close(p.peer);
}

TEST_P(BackgroundSend, AFailedSendIsReportedByTheNextWriteAndByFlush) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  StreamPair p = stream_pair(rt);
  ::close(p.peer);  // every send now fails (EPIPE)
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    std::error_code first = co_await p.stream.write_all("one", Deadline::after(2s));
    std::error_code second = co_await p.stream.write_all("two", Deadline::after(2s));
    std::error_code flushed = co_await p.stream.flush(Deadline::after(2s));
    // epoll: the first write fails itself; io_uring: its send fails, which the second
    // reports. Either way no write after a failure succeeds.
    if (!first && !second) co_return "two writes to a closed peer succeeded";
    if (uses_io_uring(rt) && first) co_return "the first write waited for its send";
    if (!uses_io_uring(rt) && flushed) co_return "flush without a send in flight failed";
    co_return "ok";
  });
  EXPECT_EQ(h.wait(), "ok");
  EXPECT_TRUE(sg::testing::eventually([&] { return ring_ops_in_flight(rt) == 0; }));
}

TEST_P(BackgroundSend, WritesDoneOnlyOnceTheLastWriteHasGoneOutWhole) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  StreamPair p = stream_pair(rt);
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    if (!p.stream.writes_done()) co_return "no write yet, but not done";
    if (co_await p.stream.write_all("hello", Deadline::after(2s))) co_return "the write failed";
    if (co_await p.stream.flush(Deadline::after(2s))) co_return "the flush failed";
    if (!p.stream.writes_done()) co_return "flushed, but not done";
    co_return "ok";
  });
  EXPECT_EQ(h.wait(), "ok");
  bool eof = false;
  EXPECT_EQ(read_to_eof(p.peer, 200ms, eof), "hello");
  ::close(p.peer);
}

// An idle keep-alive connection keeps no copy of its last response: once a send has gone
// out whole, the ring takes it out of the socket (io_uring; on epoll a write never leaves
// one there).
TEST_P(BackgroundSend, ASendThatWentOutWholeLeavesTheSocket) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  StreamPair p = stream_pair(rt);
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    if (co_await p.stream.write_all("response", Deadline::after(2s))) co_return "the write failed";
    co_return "ok";
  });
  EXPECT_EQ(h.wait(), "ok");
  bool eof = false;
  EXPECT_EQ(read_to_eof(p.peer, 200ms, eof), "response");
  EXPECT_TRUE(sg::testing::eventually([&] { return !p.stream.socket().send_pending(); }))
      << "the socket still holds a send that has completed";
  EXPECT_TRUE(p.stream.writes_done());
  p.stream.close();
  EXPECT_EQ(read_to_eof(p.peer, 2s, eof), "");
  EXPECT_TRUE(eof);
  ::close(p.peer);
}

// A stream moved (from a heap object that is then freed) while its last send waits for
// room in the socket: the send stays the moved stream's, its completion empties the new
// slot (AddressSanitizer: the old one is never touched), and every byte arrives in order.
TEST_P(BackgroundSend, AStreamMovedWhileItsSendRunsKeepsIt) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  StreamPair p = stream_pair(rt);
  std::string filler;
  const std::string chunk = pattern(4096, 3);
  while (::send(p.stream.native_handle(), chunk.data(), chunk.size(), MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(chunk.size())) {
    filler += chunk;  // (the socket is full when a send takes less, or nothing)
  }
  auto held = std::make_unique<TcpStream>(std::move(p.stream));
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    if (co_await held->write_all("tail", Deadline::after(10s))) co_return "the write failed";
    co_return "ok";
  });
  std::string got;
  bool eof = false;
  auto read_all = [&] {
    while (got.size() < filler.size() + 4) {
      const std::string more = read_to_eof(p.peer, 200ms, eof);
      if (more.empty()) break;
      got += more;
    }
  };
  if (!uses_io_uring(rt)) read_all();  // (epoll: the write waits for room, so the reader goes first)
  EXPECT_EQ(h.wait(), "ok");
  if (uses_io_uring(rt)) {
    EXPECT_TRUE(held->socket().send_pending()) << "the send did not wait for room";
  }
  TcpStream moved = std::move(*held);
  held.reset();
  read_all();
  EXPECT_TRUE(got.size() >= filler.size() && got.compare(0, filler.size(), filler) == 0);
  EXPECT_EQ(got.substr(std::min(got.size(), filler.size())), "tail");
  EXPECT_TRUE(sg::testing::eventually([&] { return !moved.socket().send_pending(); }));
  moved.close();
  EXPECT_EQ(read_to_eof(p.peer, 2s, eof), "");
  EXPECT_TRUE(eof);
  EXPECT_TRUE(sg::testing::eventually([&] { return ring_ops_in_flight(rt) == 0; }));
  ::close(p.peer);
}

// Many connections, each a task that writes a numbered message, waits for the peer's
// answer, and closes after the last: reads and writes of tasks that move between workers
// (a send started on one ring, the next read on another), closes right after a write.
TEST_P(BackgroundSend, TasksMovingBetweenWorkersWriteReadAndCloseInOrder) {
  SG_DRIVER_RUNTIME(rt, workers(4));
  constexpr int kConns = 24;
  constexpr int kRounds = 60;
  std::vector<StreamPair> pairs;
  for (int i = 0; i < kConns; ++i) pairs.push_back(stream_pair(rt));
  std::vector<exec::JoinHandle<std::string>> tasks;
  for (int c = 0; c < kConns; ++c) {
    tasks.push_back(rt.spawn([&, c]() -> exec::Task<std::string> {
      TcpStream& s = pairs[static_cast<std::size_t>(c)].stream;
      for (int i = 0; i < kRounds; ++i) {
        const std::string msg = "m" + std::to_string(i) + pattern(static_cast<std::size_t>(50 + (c * 31 + i * 17) % 3000), i) + "\n";
        if (auto ec = co_await s.write_all(msg, Deadline::after(10s))) co_return "write: " + ec.message();
        co_await exec::yield_now();  // a chance to be stolen between the send and the read
        char buf[16];
        IoResult r = co_await s.read_some(buf, Deadline::after(10s));
        if (r.ec || r.n != 1 || buf[0] != 'k') co_return "no answer to message " + std::to_string(i);
      }
      s.close();
      co_return "ok";
    }));
  }
  // The peers: read each message whole, check it, answer "k"; at the end expect EOF.
  std::vector<std::string> pending(kConns);
  std::vector<int> rounds(kConns, 0);
  std::vector<bool> eof(kConns, false);
  const auto until = std::chrono::steady_clock::now() + 30s;
  int done = 0;
  std::string failure;
  while (done < kConns && std::chrono::steady_clock::now() < until && failure.empty()) {
    std::vector<pollfd> fds;
    for (int c = 0; c < kConns; ++c) fds.push_back({pairs[static_cast<std::size_t>(c)].peer, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 10);
    for (int c = 0; c < kConns && failure.empty(); ++c) {
      if (eof[static_cast<std::size_t>(c)]) continue;
      char buf[8192];
      const ssize_t k = ::recv(pairs[static_cast<std::size_t>(c)].peer, buf, sizeof(buf), MSG_DONTWAIT);
      if (k == 0) {
        eof[static_cast<std::size_t>(c)] = true;
        ++done;
        if (rounds[static_cast<std::size_t>(c)] != kRounds) failure = "EOF before the last message";
        continue;
      }
      if (k < 0) continue;
      std::string& buffered = pending[static_cast<std::size_t>(c)];
      buffered.append(buf, static_cast<std::size_t>(k));
      std::size_t nl;
      while ((nl = buffered.find('\n')) != std::string::npos) {
        const int i = rounds[static_cast<std::size_t>(c)]++;
        const std::string want = "m" + std::to_string(i) + pattern(static_cast<std::size_t>(50 + (c * 31 + i * 17) % 3000), i);
        if (buffered.compare(0, nl, want) != 0) failure = "message " + std::to_string(i) + " changed or out of order";
        buffered.erase(0, nl + 1);
        (void)::send(pairs[static_cast<std::size_t>(c)].peer, "k", 1, MSG_NOSIGNAL);
      }
    }
  }
  EXPECT_EQ(failure, "");
  EXPECT_EQ(done, kConns) << "not every connection reached EOF";
  for (auto& t : tasks) EXPECT_EQ(t.wait(), "ok");
  EXPECT_TRUE(sg::testing::eventually([&] { return ring_ops_in_flight(rt) == 0; }));
  for (StreamPair& p : pairs) ::close(p.peer);
}


// Runs `body` with a ring of its own and a socket pair whose first end the ring sends on,
// on a thread of its own: the kernel sends a ring's creator task work when the ring is
// torn down (TWA_SIGNAL), which would interrupt a later test's blocking call on the test
// thread with EINTR.
template <class Body>
void on_a_ring_thread(Body body) {
  if (!sg::testing::driver_available(IoDriverKind::kIoUring,
                                     ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    GTEST_SKIP() << "io_uring is not available here";
  }
  std::thread([&] {
    auto ring = UringDriver::create();
    ASSERT_TRUE(ring.ok());
    (*ring)->attach();
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    body(**ring, sv[0], sv[1]);
    (*ring)->detach();
  }).join();
}

// What a socket's close does with a send still in flight (Socket::close): takes it out of
// the socket and hands it, with the tail, to the ring.
void close_with_send_in_flight(UringDriver& ring, int fd, std::string_view bytes, std::string tail) {
  std::atomic<UringOp*> slot{nullptr};
  std::string_view bufs[1] = {bytes};
  ring.start_background_send(fd, bufs, std::chrono::steady_clock::now() + 5s, slot);
  UringOp* send = slot.exchange(nullptr);
  disown_send(send);
  close_after_send(send, nullptr, std::move(tail));
}

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

TEST(BackgroundSendOnOneRing, AClosesFinLeavesWithItsLastSendBeforeTheRingReapsIt) {
  on_a_ring_thread([](UringDriver& ring, int fd, int peer) {
    close_with_send_in_flight(ring, fd, "last response bytes", "close_notify");
    // One submit and nothing reaped: the FIN used to wait for the send's completion to be
    // reaped, then for the close's own submit.
    ring.flush();
    bool eof = false;
    EXPECT_EQ(read_to_eof(peer, 2s, eof), "last response bytes" "close_notify");
    EXPECT_TRUE(eof) << "no FIN before the send's completion was reaped";
    ASSERT_TRUE(sg::testing::eventually([&] { return !is_open(fd); })) << "the linked close did not run";
    // The number now names another socket: reaping the send's completion must not close it.
    ASSERT_EQ(::dup2(peer, fd), fd);
    ring.poll(64);
    ring.flush();
    ring.poll(64);
    EXPECT_TRUE(is_open(fd)) << "the send's completion closed the descriptor a second time";
    ::close(fd);
    ::close(peer);
  });
}

TEST(BackgroundSendOnOneRing, AFailedLastSendStillClosesItsDescriptor) {
  on_a_ring_thread([](UringDriver& ring, int fd, int peer) {
    ::close(peer);  // the send fails (EPIPE): its linked close is cancelled
    close_with_send_in_flight(ring, fd, "nobody reads this", "");
    EXPECT_TRUE(sg::testing::eventually([&] {
      ring.flush();
      ring.poll(64);
      return !is_open(fd);
    })) << "the descriptor of a failed send was never closed";
  });
}

}  // namespace
}  // namespace sg::io::background_send_test
