// Writes (io_uring: writes under 8 KiB are sends that own a copy of their bytes, bigger
// ones sendmsg; epoll: sendmsg and writable waits), on both drivers: a write far bigger
// than the socket's buffer, and thousands of small ones, arrive whole and in order; small
// and big writes to a peer that stops reading time out and leave no operation; a task
// dropped in the middle of a write leaves the kernel sending only the bytes it was given
// (the copy), never freed memory.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "io/runtime.h"
#include "io/tcp.h"
#include "../../support/eventually.h"
#include "../../support/io_drivers.h"
#include "../../support/stream_pair.h"
#include "../../support/workers.h"

namespace sg::io {
namespace {

using namespace std::chrono_literals;
using sg::testing::pattern;
using sg::testing::ring_ops_in_flight;
using sg::testing::read_peer;
using sg::testing::workers;

class Send : public ::testing::TestWithParam<IoDriverKind> {};
INSTANTIATE_TEST_SUITE_P(Drivers, Send, sg::testing::kDrivers, sg::testing::driver_test_name);

TEST_P(Send, AWriteFarBiggerThanTheSocketBufferArrivesWholeAndInOrder) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  sg::testing::StreamPair p = sg::testing::stream_pair(rt);
  // Three pieces, 1.2 MiB: many sends, most of them short (the socket buffer is ~200 KiB).
  const std::string a = pattern(700'000, 1), b = pattern(5, 2), c = pattern(500'000, 3);
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    std::string_view bufs[] = {a, b, c};
    auto ec = co_await p.stream.write_all(std::span<const std::string_view>(bufs), Deadline::after(20s));
    co_return ec ? ec.message() : "ok";
  });
  std::string got = read_peer(p.peer, a.size() + b.size() + c.size(), 20s);
  EXPECT_EQ(h.wait(), "ok");
  ASSERT_EQ(got.size(), a.size() + b.size() + c.size());
  EXPECT_TRUE(got == a + b + c) << "the bytes arrived out of order or changed";
  EXPECT_TRUE(sg::testing::eventually([&] { return ring_ops_in_flight(rt) == 0; }));
  ::close(p.peer);
}

TEST_P(Send, AGatheredWriteOfManyPiecesSomeEmptyArrivesWholeAndInOrder) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  sg::testing::StreamPair p = sg::testing::stream_pair(rt);
  // 300 pieces (more than one sendmsg takes: 64 buffers), every third one empty, and big
  // enough in total (~1.5 MiB) for short writes that end inside a piece.
  std::vector<std::string> pieces;
  std::string expected;
  for (int i = 0; i < 300; ++i) {
    pieces.push_back(i % 3 == 2 ? std::string() : pattern(static_cast<std::size_t>(1 + (i * 7919) % 10'000), i));
    expected += pieces.back();
  }
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    std::vector<std::string_view> bufs(pieces.begin(), pieces.end());
    auto ec = co_await p.stream.write_all(std::span<const std::string_view>(bufs), Deadline::after(20s));
    co_return ec ? ec.message() : "ok";
  });
  std::string got = read_peer(p.peer, expected.size(), 20s);
  EXPECT_EQ(h.wait(), "ok");
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected) << "the bytes arrived out of order or changed";
  ::close(p.peer);
}

TEST_P(Send, ThousandsOfSmallWritesArriveWholeAndInOrder) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  sg::testing::StreamPair p = sg::testing::stream_pair(rt);
  const std::string all = pattern(6'000'000, 6);
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    // 1 B .. 8 KiB, as a head and a piece of body: sends on the ring, many of them waiting
    // for the slow reader below (the kernel retries them when the socket has room).
    std::size_t off = 0;
    for (std::size_t i = 0; off < all.size(); ++i) {
      const std::size_t n = std::min<std::size_t>(1 + (i * 7919) % 8000, all.size() - off);
      std::string_view parts[] = {std::string_view(all).substr(off, n / 3), std::string_view(all).substr(off + n / 3, n - n / 3)};
      if (auto ec = co_await p.stream.write_all(std::span<const std::string_view>(parts), Deadline::after(20s))) {
        co_return ec.message();
      }
      off += n;
    }
    co_return "ok";
  });
  std::string got = read_peer(p.peer, all.size(), 30s);
  EXPECT_EQ(h.wait(), "ok");
  ASSERT_EQ(got.size(), all.size());
  EXPECT_TRUE(got == all) << "the bytes arrived out of order or changed";
  EXPECT_TRUE(sg::testing::eventually([&] { return ring_ops_in_flight(rt) == 0; }));
  ::close(p.peer);
}

TEST_P(Send, SmallWritesToAPeerThatStopsReadingTimeOutAndLeaveNoOperation) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  sg::testing::StreamPair p = sg::testing::stream_pair(rt);
  const std::string piece = pattern(4000, 7);
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    auto t0 = Clock::now();
    for (int i = 0; i < 100'000; ++i) {
      auto ec = co_await p.stream.write_all(piece, Deadline::after(100ms));
      if (!ec) continue;
      if (ec != std::errc::timed_out) co_return "expected a timeout, got " + ec.message();
      if (Clock::now() - t0 < 90ms) co_return "timed out too early";
      co_return "ok";
    }
    co_return "never blocked";
  });
  EXPECT_EQ(h.wait(), "ok");
  EXPECT_TRUE(sg::testing::eventually([&] { return ring_ops_in_flight(rt) == 0; }));
  ::close(p.peer);
}

TEST_P(Send, AWriteToAPeerThatStopsReadingTimesOutAndLeavesNoOperation) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  sg::testing::StreamPair p = sg::testing::stream_pair(rt);
  const std::string big = pattern(4'000'000, 4);
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    auto t0 = Clock::now();
    auto ec = co_await p.stream.write_all(big, Deadline::after(100ms));
    if (ec != std::errc::timed_out) co_return "expected a timeout, got " + (ec ? ec.message() : "success");
    if (Clock::now() - t0 < 90ms) co_return "timed out too early";
    co_return "ok";
  });
  EXPECT_EQ(h.wait(), "ok");
  EXPECT_TRUE(sg::testing::eventually([&] { return ring_ops_in_flight(rt) == 0; }));
  ::close(p.peer);
}

TEST_P(Send, ATaskDroppedInTheMiddleOfAWriteLeavesOnlyItsBytesToSend) {
  SG_DRIVER_RUNTIME(rt, workers(2));
  sg::testing::StreamPair p = sg::testing::stream_pair(rt);
  std::atomic<bool> writing{false};
  auto h = rt.spawn([&]() -> exec::Task<void> {
    // The data lives in this frame, which is freed when the task is dropped below; small
    // writes, so that the one in flight is a send on the ring (io_uring).
    std::string mine = pattern(3'000'000, 5);
    writing = true;
    for (std::size_t off = 0; off < mine.size(); off += 5000) {
      if (co_await p.stream.write_all(std::string_view(mine).substr(off, 5000))) co_return;
    }
  });
  ASSERT_TRUE(sg::testing::eventually([&] { return writing.load(); }));
  std::this_thread::sleep_for(20ms);  // the socket buffer is full: a send is in flight
  h.cancel();
  EXPECT_FALSE(h.wait());
  // Whatever the socket still carries is a prefix of the pattern: the copy, not memory
  // that was freed (and reused) with the frame.
  std::string got = read_peer(p.peer, 3'000'000, 300ms);
  const std::string expect = pattern(3'000'000, 5);
  ASSERT_GT(got.size(), 0u);
  EXPECT_TRUE(expect.compare(0, got.size(), got) == 0) << "received bytes that were never written";
  p.stream.close();
  EXPECT_TRUE(sg::testing::eventually([&] { return ring_ops_in_flight(rt) == 0; }));
  ::close(p.peer);
}

TEST_P(Send, ACloseOnAWorkerReachesThePeerAfterTheLastWrite) {
  // io_uring: the close is a submission of the worker's ring, after the send before it.
  SG_DRIVER_RUNTIME(rt, workers(2));
  sg::testing::StreamPair p = sg::testing::stream_pair(rt);
  auto h = rt.spawn([&]() -> exec::Task<bool> {
    auto ec = co_await p.stream.write_all("bye");
    p.stream.close();
    co_return !ec;
  });
  EXPECT_EQ(h.wait(), std::optional<bool>(true));
  EXPECT_EQ(read_peer(p.peer, 100, 2s), "bye");  // then EOF (read_peer stops at it)
  char c;
  EXPECT_EQ(::recv(p.peer, &c, 1, MSG_DONTWAIT), 0);
  ::close(p.peer);
}

}  // namespace
}  // namespace sg::io
