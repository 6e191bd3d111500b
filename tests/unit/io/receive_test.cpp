// Reads through the socket's receive (io_uring: a receive into a provided buffer that the
// socket keeps until a read takes it; epoll: readiness and recv), on both drivers: a read
// that times out or a wait that another socket won loses no byte; a receive bigger than
// the reader's buffer is taken in pieces, in order; an idle reader holds no buffer; more
// ready sockets than buffers still read everything, and a ring's buffers grow to meet
// them; a wait during a shortage of buffers wakes only for input; bytes already there
// when a receive starts are taken at once; closing a socket whose received bytes nobody
// took gives the buffer back.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "exec/scheduler.h"
#include "io/runtime.h"
#include "io/tcp.h"
#include "io/uring.h"
#include "../../support/eventually.h"
#include "../../support/io_drivers.h"
#include "../../support/workers.h"

namespace sg::io {
namespace {

using namespace std::chrono_literals;
using sg::testing::uses_io_uring;
using sg::testing::workers;

class Receive : public ::testing::TestWithParam<IoDriverKind> {};
INSTANTIATE_TEST_SUITE_P(Drivers, Receive, sg::testing::kDrivers, sg::testing::driver_test_name);

struct ReceivePair {
  int peer = -1;  // the test thread's end
  std::unique_ptr<TcpStream> stream;
};

ReceivePair make_receive_pair(Runtime& rt) {
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  auto s = Socket::adopt(rt.context(), sv[0]);
  return ReceivePair{sv[1], std::make_unique<TcpStream>(std::move(s))};
}

RingStats ring_totals(Runtime& rt) {
  RingStats t;
  for (const RingStats& r : rt.ring_stats()) {
    t.in_flight += r.in_flight;
    t.buffers_provided += r.buffers_provided;
    t.buffers_in_use += r.buffers_in_use;
    t.buffer_shortages += r.buffer_shortages;
  }
  return t;
}

// Reads until `n` bytes have arrived (or an error/EOF), in reads of at most `piece`.
exec::Task<std::string> read_exactly(TcpStream& s, std::size_t n, std::size_t piece) {
  std::string got;
  std::vector<char> buf(piece);
  while (got.size() < n) {
    IoResult r = co_await s.read_some(std::span<char>(buf.data(), std::min(piece, n - got.size())));
    if (r.ec || r.n == 0) break;
    got.append(buf.data(), r.n);
  }
  co_return got;
}

TEST_P(Receive, ATimedOutReadLosesNoByte) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  ReceivePair p = make_receive_pair(rt);
  std::atomic<bool> timed_out{false};
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    char buf[64];
    IoResult r = co_await p.stream->read_some(buf, Deadline::after(30ms));
    if (r.ec != std::errc::timed_out) co_return "expected a timeout, got " + r.ec.message();
    timed_out = true;
    // The bytes sent now reach the receive the timed-out read left behind (io_uring).
    co_await exec::sleep_for(50ms);
    co_return co_await read_exactly(*p.stream, 11, 64);
  });
  ASSERT_TRUE(sg::testing::eventually([&] { return timed_out.load(); }));
  ASSERT_EQ(::send(p.peer, "hello world", 11, 0), 11);
  EXPECT_EQ(h.wait(), "hello world");
  ::close(p.peer);
}

TEST_P(Receive, AReceiveBiggerThanTheReadIsTakenInPiecesInOrder) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  ReceivePair p = make_receive_pair(rt);
  std::string sent;
  for (int i = 0; i < 10'000; ++i) sent.push_back(static_cast<char>('a' + i % 26));
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    // The wait's receive brings up to a whole buffer; reads of 7 bytes take it in pieces.
    EitherReadable w = co_await p.stream->wait_readable(nullptr);
    if (w.ec) co_return "wait: " + w.ec.message();
    co_return co_await read_exactly(*p.stream, sent.size(), 7);
  });
  ASSERT_EQ(::send(p.peer, sent.data(), sent.size(), 0), static_cast<ssize_t>(sent.size()));
  EXPECT_EQ(h.wait(), sent);
  if (uses_io_uring(rt)) {
    EXPECT_TRUE(sg::testing::eventually([&] { return ring_totals(rt).buffers_in_use == 0; }));
  }
  ::close(p.peer);
}

TEST_P(Receive, AnEitherWaitWonByTheOtherSocketKeepsWhatTheFirstReceives) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  ReceivePair a = make_receive_pair(rt);
  ReceivePair b = make_receive_pair(rt);
  std::atomic<bool> b_won{false};
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    EitherReadable w = co_await a.stream->wait_readable(b.stream.get());
    if (w.which != 1) co_return "expected the other socket to win";
    b_won = true;
    co_await exec::sleep_for(50ms);  // "first" arrives now, at the receive left on `a`
    std::string got = co_await read_exactly(*a.stream, 12, 64);
    co_return got;
  });
  ASSERT_EQ(::send(b.peer, "x", 1, 0), 1);
  ASSERT_TRUE(sg::testing::eventually([&] { return b_won.load(); }));
  ASSERT_EQ(::send(a.peer, "first", 5, 0), 5);
  std::this_thread::sleep_for(10ms);
  ASSERT_EQ(::send(a.peer, " second", 7, 0), 7);
  EXPECT_EQ(h.wait(), "first second");
  // What woke the wait on `b` is kept for b's next read, before what follows it.
  ASSERT_EQ(::send(b.peer, "yz", 2, 0), 2);
  auto rb = rt.spawn([&]() -> exec::Task<std::string> { co_return co_await read_exactly(*b.stream, 3, 64); });
  EXPECT_EQ(rb.wait(), "xyz");
  ::close(a.peer);
  ::close(b.peer);
}

TEST_P(Receive, IdleReadersHoldNoReceiveBuffer) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  constexpr int kReaders = 50;
  std::vector<ReceivePair> pairs;
  for (int i = 0; i < kReaders; ++i) pairs.push_back(make_receive_pair(rt));
  std::atomic<int> started{0};
  std::vector<exec::JoinHandle<std::string>> hs;
  for (auto& p : pairs) {
    hs.push_back(rt.spawn([&]() -> exec::Task<std::string> {
      started.fetch_add(1);
      co_return co_await read_exactly(*p.stream, 3, 16);
    }));
  }
  ASSERT_TRUE(sg::testing::eventually([&] { return started.load() == kReaders; }));
  if (uses_io_uring(rt)) {
    // One receive per waiting socket, none of them holding a buffer.
    ASSERT_TRUE(sg::testing::eventually([&] { return ring_totals(rt).in_flight >= kReaders; }));
    EXPECT_EQ(ring_totals(rt).buffers_in_use, 0u);
  }
  for (auto& p : pairs) ASSERT_EQ(::send(p.peer, "abc", 3, 0), 3);
  for (auto& h : hs) EXPECT_EQ(h.wait(), "abc");
  if (uses_io_uring(rt)) {
    EXPECT_TRUE(sg::testing::eventually([&] {
      RingStats t = ring_totals(rt);
      return t.buffers_in_use == 0 && t.in_flight == 0;
    }));
  }
  for (auto& p : pairs) ::close(p.peer);
}

// Spawns a task per socket in pairs[first..] that waits until its socket is readable
// (io_uring: its receive completes and keeps the bytes, holding a buffer or finding none),
// then waits for `go` and reads the 8 bytes; sends each socket its bytes.
void hold_and_read(Runtime& rt, std::vector<ReceivePair>& pairs, std::size_t first, std::atomic<int>& woken,
                   std::atomic<bool>& go, std::vector<exec::JoinHandle<std::string>>& hs) {
  for (std::size_t i = first; i < pairs.size(); ++i) {
    ReceivePair* p = &pairs[i];
    hs.push_back(rt.spawn([p, &woken, &go]() -> exec::Task<std::string> {
      EitherReadable w = co_await p->stream->wait_readable(nullptr);
      woken.fetch_add(1);
      if (w.ec) co_return "wait: " + w.ec.message();
      while (!go.load()) co_await exec::sleep_for(1ms);
      co_return co_await read_exactly(*p->stream, 8, 64);
    }));
  }
  for (std::size_t i = first; i < pairs.size(); ++i) {
    std::string msg = "m" + std::to_string(1'000'000 + i).substr(1) + ".";  // 8 bytes
    ASSERT_EQ(::send(pairs[i].peer, msg.data(), msg.size(), 0), 8);
  }
}

TEST_P(Receive, MoreReadySocketsThanBuffersStillReadEverything) {
  SG_DRIVER_RUNTIME(rt, workers(1));  // one ring: more ready sockets than its buffers
  // Three waves of 48 sockets, back to back, whose receives keep their bytes until the
  // reads at the end: a burst. On io_uring the ring starts with 32 buffers; its shortages
  // count (the 16th since the last that counted, at least 1 in 16 of the receives, every
  // buffer held) but do not last kGrowInterval, so it does not grow, and the 112 receives
  // that found no buffer read with recv.
  static_assert(UringDriver::kInitialReceiveBuffers == 32 && UringDriver::kGrowAfterShortages == 16 &&
                UringDriver::kShortageRate == 16);
  constexpr int kWave = 48;
  constexpr int kWaves = 3;
  std::vector<ReceivePair> pairs;
  pairs.reserve(std::size_t{kWave} * kWaves);  // the tasks hold pointers into it
  std::atomic<int> woken{0};
  std::atomic<bool> go{false};
  std::vector<exec::JoinHandle<std::string>> hs;
  for (int wave = 0; wave < kWaves; ++wave) {
    const std::size_t first = pairs.size();
    for (int i = 0; i < kWave; ++i) pairs.push_back(make_receive_pair(rt));
    hold_and_read(rt, pairs, first, woken, go, hs);
    ASSERT_TRUE(sg::testing::eventually([&] { return woken.load() == static_cast<int>(pairs.size()); }));
    if (uses_io_uring(rt)) {
      RingStats t = ring_totals(rt);
      EXPECT_EQ(t.buffers_provided, std::size_t{UringDriver::kInitialReceiveBuffers}) << "a burst grew the ring";
      EXPECT_EQ(t.buffers_in_use + t.buffer_shortages, pairs.size()) << "each receive holds a buffer or found none";
      EXPECT_EQ(t.buffers_in_use, t.buffers_provided);
    }
  }
  go = true;
  for (std::size_t i = 0; i < hs.size(); ++i) {
    EXPECT_EQ(hs[i].wait(), "m" + std::to_string(1'000'000 + i).substr(1) + ".");
  }
  if (uses_io_uring(rt)) {
    EXPECT_TRUE(sg::testing::eventually([&] { return ring_totals(rt).buffers_in_use == 0; }));
  }
  for (auto& p : pairs) ::close(p.peer);
}

TEST_P(Receive, ShortagesThatLastGrowTheRing) {
  SG_DRIVER_RUNTIME(rt, workers(1));
  // A wave of 32 held receives every 250 ms: the first takes the ring's 32 buffers, each
  // later one finds them all held (32 shortages that count). The ring doubles once such
  // shortages have kept coming for kGrowInterval, not before; the next doubling would
  // need as long again, so the wave after it leaves the ring at 64, its buffers used.
  constexpr int kWave = 32;
  constexpr int kMaxWaves = 16;
  constexpr auto kSpacing = 250ms;
  const auto start = std::chrono::steady_clock::now();
  std::vector<ReceivePair> pairs;
  pairs.reserve(std::size_t{kWave} * kMaxWaves);
  std::atomic<int> woken{0};
  std::atomic<bool> go{false};
  std::vector<exec::JoinHandle<std::string>> hs;
  int waves_after_growth = -1;
  const int waves = uses_io_uring(rt) ? kMaxWaves : 3;  // (epoll: only the reads to check)
  for (int wave = 0; wave < waves && waves_after_growth < 1; ++wave) {
    std::this_thread::sleep_until(start + wave * kSpacing);
    const std::size_t first = pairs.size();
    for (int i = 0; i < kWave; ++i) pairs.push_back(make_receive_pair(rt));
    hold_and_read(rt, pairs, first, woken, go, hs);
    ASSERT_TRUE(sg::testing::eventually([&] { return woken.load() == static_cast<int>(pairs.size()); }));
    if (!uses_io_uring(rt)) continue;
    const std::size_t provided = ring_totals(rt).buffers_provided;
    if (std::chrono::steady_clock::now() - start < UringDriver::kGrowInterval) {
      EXPECT_EQ(provided, std::size_t{UringDriver::kInitialReceiveBuffers}) << "grew before the shortages lasted";
    }
    if (provided > UringDriver::kInitialReceiveBuffers) ++waves_after_growth;
  }
  if (uses_io_uring(rt)) {
    RingStats t = ring_totals(rt);
    EXPECT_EQ(waves_after_growth, 1) << "sustained shortages did not grow the ring";
    EXPECT_EQ(t.buffers_provided, 2 * std::size_t{UringDriver::kInitialReceiveBuffers});
    EXPECT_EQ(t.buffers_in_use, t.buffers_provided) << "the buffers the ring grew by were not used";
  }
  go = true;
  for (std::size_t i = 0; i < hs.size(); ++i) {
    EXPECT_EQ(hs[i].wait(), "m" + std::to_string(1'000'000 + i).substr(1) + ".");
  }
  for (auto& p : pairs) ::close(p.peer);
}

TEST_P(Receive, AFewShortagesDoNotGrowTheRing) {
  SG_DRIVER_RUNTIME(rt, workers(1));
  // 40 held receives on 32 buffers: 8 find none (fewer than 16), and read with recv.
  std::vector<ReceivePair> pairs;
  for (int i = 0; i < 40; ++i) pairs.push_back(make_receive_pair(rt));
  std::atomic<int> woken{0};
  std::atomic<bool> go{false};
  std::vector<exec::JoinHandle<std::string>> hs;
  hold_and_read(rt, pairs, 0, woken, go, hs);
  ASSERT_TRUE(sg::testing::eventually([&] { return woken.load() == 40; }));
  if (uses_io_uring(rt)) {
    RingStats t = ring_totals(rt);
    EXPECT_EQ(t.buffer_shortages, 8u);
    EXPECT_EQ(t.buffers_provided, std::size_t{UringDriver::kInitialReceiveBuffers});
  }
  go = true;
  for (std::size_t i = 0; i < hs.size(); ++i) {
    EXPECT_EQ(hs[i].wait(), "m" + std::to_string(1'000'000 + i).substr(1) + ".");
  }
  for (auto& p : pairs) ::close(p.peer);
}

// A receive is submitted poll-first (io/uring.h): it picks a buffer only once bytes are
// there. While every buffer of the ring is held, a silent socket's wait stays a wait, as
// on epoll (before poll-first, io_uring picked the buffer first and the receive completed
// at once, -ENOBUFS: an idle keep-alive connection woke for nothing). Bytes that arrive
// during the shortage complete it without a buffer; the wait reports input and the read
// takes them from the socket with a plain recv.
TEST_P(Receive, AWaitDuringABufferShortageWakesOnlyForInput) {
  SG_DRIVER_RUNTIME(rt, workers(1));
  std::vector<ReceivePair> pairs;
  for (std::size_t i = 0; i < UringDriver::kInitialReceiveBuffers; ++i) pairs.push_back(make_receive_pair(rt));
  std::atomic<int> woken{0};
  std::atomic<bool> go{false};
  std::vector<exec::JoinHandle<std::string>> hs;
  hold_and_read(rt, pairs, 0, woken, go, hs);
  ASSERT_TRUE(sg::testing::eventually([&] { return woken.load() == static_cast<int>(pairs.size()); }));
  if (uses_io_uring(rt)) {
    ASSERT_EQ(ring_totals(rt).buffers_in_use, pairs.size()) << "every buffer held";
  }

  ReceivePair silent = make_receive_pair(rt);
  auto wait_once = [&](std::chrono::milliseconds limit) {
    return rt.spawn([&silent, limit]() -> exec::Task<std::string> {
      EitherReadable w = co_await silent.stream->wait_readable(nullptr, Deadline::after(limit));
      if (w.ec) co_return w.ec == std::errc::timed_out ? "timed out" : "wait: " + w.ec.message();
      co_return silent.stream->woke_with_input() ? "input" : "no input";
    });
  };
  EXPECT_EQ(wait_once(300ms).wait(), "timed out");

  ASSERT_EQ(::send(silent.peer, "abc", 3, 0), 3);  // every buffer still held
  EXPECT_EQ(wait_once(5s).wait(), "input");
  EXPECT_EQ(rt.block_on(read_exactly(*silent.stream, 3, 16)), "abc");
  if (uses_io_uring(rt)) {
    EXPECT_EQ(ring_totals(rt).buffers_in_use, pairs.size()) << "read without a buffer of the ring";
  }

  go = true;  // the held readers read: their buffers go back to the ring
  for (auto& h : hs) h.wait();
  ASSERT_EQ(::send(silent.peer, "xyz", 3, 0), 3);
  EXPECT_EQ(wait_once(5s).wait(), "input");
  EXPECT_EQ(rt.block_on(read_exactly(*silent.stream, 3, 16)), "xyz");
  for (auto& p : pairs) ::close(p.peer);
  ::close(silent.peer);
}

// Poll-first does not wait for more bytes when some are there when the receive starts:
// the poll finds the socket ready at once. Bytes, then a close, sent before any wait.
TEST_P(Receive, BytesAlreadyThereWhenAReceiveStartsAreTakenAtOnce) {
  SG_DRIVER_RUNTIME(rt, workers(1));
  ReceivePair p = make_receive_pair(rt);
  ASSERT_EQ(::send(p.peer, "early", 5, 0), 5);
  ::shutdown(p.peer, SHUT_WR);
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    EitherReadable w = co_await p.stream->wait_readable(nullptr, Deadline::after(5s));
    if (w.ec) co_return "wait: " + w.ec.message();
    std::string got = co_await read_exactly(*p.stream, 5, 64);
    char buf[8];
    IoResult eof = co_await p.stream->read_some(buf, Deadline::after(5s));
    co_return got + (eof.ec ? " error " + eof.ec.message() : eof.n == 0 ? " eof" : " more");
  });
  EXPECT_EQ(h.wait(), "early eof");
  ::close(p.peer);
}

TEST_P(Receive, ClosingASocketWithUntakenBytesGivesTheBufferBack) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  ReceivePair p = make_receive_pair(rt);
  auto h = rt.spawn([&]() -> exec::Task<bool> {
    EitherReadable w = co_await p.stream->wait_readable(nullptr);
    // The bytes are in the socket's receive now (io_uring): nothing takes them.
    p.stream->close();
    co_return !w.ec;
  });
  ASSERT_EQ(::send(p.peer, "unread", 6, 0), 6);
  EXPECT_EQ(h.wait(), std::optional<bool>(true));
  if (uses_io_uring(rt)) {
    EXPECT_TRUE(sg::testing::eventually([&] {
      RingStats t = ring_totals(rt);
      return t.buffers_in_use == 0 && t.in_flight == 0;
    }));
  }
  ::close(p.peer);
}

TEST_P(Receive, PeekSeesWhatAReceiveHolds) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  ReceivePair p = make_receive_pair(rt);
  std::atomic<bool> looked{false};
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    if (!p.stream->silent()) co_return "not silent before any byte";
    looked = true;
    EitherReadable w = co_await p.stream->wait_readable(nullptr);
    if (w.ec) co_return w.ec.message();
    // On io_uring the byte has left the kernel's socket for the receive: peek must still
    // see it.
    if (p.stream->peek() != TcpStream::PeerState::kData) co_return "peek missed the received byte";
    char c;
    auto got = p.stream->try_read(std::span<char>(&c, 1));
    if (!got || got->n != 1 || c != 'q') co_return "try_read missed the received byte";
    co_return "ok";
  });
  ASSERT_TRUE(sg::testing::eventually([&] { return looked.load(); }));
  ASSERT_EQ(::send(p.peer, "q", 1, 0), 1);
  EXPECT_EQ(h.wait(), "ok");
  ::close(p.peer);
}

// Starts a receive on `a` and, before the ring can have submitted it, stops waiting, closes
// `a` and opens a new socket pair (whose descriptor would reuse a's number if the close
// freed it at once).
struct CloseWithUnsubmittedReceive {
  TcpStream& a;
  int old_fd = -1;
  int fresh[2] = {-1, -1};
  ReceiveWait rw{};
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) {
    exec::Waker w = exec::arm_wait(h);
    old_fd = a.native_handle();
    rw.start(a.socket(), w.clone(), 0);
    rw.stop();
    a.close();
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fresh), 0);
    std::move(w).wake({}, exec::ScheduleKind::kDriver);
  }
  void await_resume() const noexcept {}
};

TEST_P(Receive, AClosedSocketsPendingReceiveNeverTakesTheNextSocketsBytes) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  ReceivePair p = make_receive_pair(rt);
  struct Out {
    int old_fd, fresh_fd, fresh_peer;
  };
  auto h = rt.spawn([&]() -> exec::Task<Out> {
    CloseWithUnsubmittedReceive c{*p.stream};
    co_await c;
    co_return Out{c.old_fd, c.fresh[0], c.fresh[1]};
  });
  auto out = h.wait();
  ASSERT_TRUE(out.has_value());
  if (uses_io_uring(rt)) {
    EXPECT_NE(out->fresh_fd, out->old_fd) << "the number was freed before the receive reached the kernel";
  }
  // The closed socket's peer sees EOF once the ring has closed it.
  char c;
  EXPECT_TRUE(sg::testing::eventually([&] { return ::recv(p.peer, &c, 1, MSG_DONTWAIT) == 0; }));
  // The new socket gets its bytes, all of them.
  auto s = Socket::adopt(rt.context(), out->fresh_fd);
  TcpStream fresh(std::move(s));
  ASSERT_EQ(::send(out->fresh_peer, "mine", 4, 0), 4);
  auto r = rt.spawn([&]() -> exec::Task<std::string> { co_return co_await read_exactly(fresh, 4, 16); });
  EXPECT_EQ(r.wait(), "mine");
  if (uses_io_uring(rt)) {
    EXPECT_TRUE(sg::testing::eventually([&] { return ring_totals(rt).in_flight == 0; }));
  }
  ::close(out->fresh_peer);
  ::close(p.peer);
}

}  // namespace
}  // namespace sg::io
