// Reads through socket receives racing deadlines, steals and drops, on both drivers (run
// under ThreadSanitizer in the test command). Tasks on three workers read numbered byte
// streams in pieces of random size with deadlines of a millisecond or two, yielding now
// and then so that thieves take them (a receive started on one ring is then re-armed,
// taken and its buffer recycled from another worker), while a writer thread sends each
// stream in chunks of random size at random moments. Every stream must arrive complete and
// in order; afterwards no operation is left on any ring and every buffer is back. A second
// round drops tasks whose receives hold bytes nobody took, and checks the same. A third
// streams between tasks on both ends: writers send in pieces of random size (io_uring:
// sends from whichever ring the writer runs on), readers read with deadlines.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "exec/scheduler.h"
#include "io/runtime.h"
#include "io/tcp.h"
#include "io/uring.h"
#include "../support/eventually.h"
#include "../support/io_drivers.h"
#include "../support/workers.h"

namespace sg::io {
namespace {

using namespace std::chrono_literals;

class ReceiveStress : public ::testing::TestWithParam<IoDriverKind> {};
INSTANTIATE_TEST_SUITE_P(Drivers, ReceiveStress, sg::testing::kDrivers, sg::testing::driver_test_name);

struct WriterReader {
  int writer = -1;
  std::unique_ptr<TcpStream> reader;
};

std::vector<WriterReader> make_streams(Runtime& rt, int n) {
  std::vector<WriterReader> out(static_cast<std::size_t>(n));
  for (auto& s : out) {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    s.writer = sv[1];
    s.reader = std::make_unique<TcpStream>(Socket::adopt(rt.context(), sv[0]));
  }
  return out;
}

char byte_at(int stream, std::size_t i) { return static_cast<char>((i * 7 + static_cast<std::size_t>(stream)) & 0xff); }

bool rings_idle(Runtime& rt) {
  for (const RingStats& r : rt.ring_stats()) {
    if (r.in_flight != 0 || r.buffers_in_use != 0) return false;
  }
  return true;
}

TEST_P(ReceiveStress, StreamsArriveWholeAndInOrderThroughDeadlinesAndSteals) {
  SG_DRIVER_RUNTIME(rt, sg::testing::workers(3));
  constexpr int kStreams = 48;
  constexpr std::size_t kBytes = 6000;
  auto streams = make_streams(rt, kStreams);
  std::atomic<long> timeouts{0}, reads{0}, mismatches{0};
  std::vector<exec::JoinHandle<std::size_t>> hs;
  for (int t = 0; t < kStreams; ++t) {
    hs.push_back(rt.spawn([&, t]() -> exec::Task<std::size_t> {
      TcpStream& s = *streams[static_cast<std::size_t>(t)].reader;
      std::mt19937 rng(static_cast<unsigned>(t));
      std::size_t got = 0;
      char buf[97];
      while (got < kBytes) {
        const std::size_t want = 1 + rng() % sizeof(buf);
        IoResult r = co_await s.read_some(std::span<char>(buf, want), Deadline::after(std::chrono::milliseconds(1 + rng() % 2)));
        if (r.ec == std::errc::timed_out) {
          timeouts.fetch_add(1);
          continue;
        }
        if (r.ec || r.n == 0) break;
        reads.fetch_add(1);
        for (std::size_t i = 0; i < r.n; ++i) {
          if (buf[i] != byte_at(t, got + i)) mismatches.fetch_add(1);
        }
        got += r.n;
        if (rng() % 5 == 0) co_await exec::yield_now();  // give thieves something to steal
      }
      co_return got;
    }));
  }
  std::thread writer([&] {
    std::mt19937 rng(7);
    std::vector<std::size_t> sent(kStreams, 0);
    for (int left = kStreams; left > 0;) {
      const int t = static_cast<int>(rng() % kStreams);
      std::size_t& off = sent[static_cast<std::size_t>(t)];
      if (off == kBytes) continue;
      char chunk[300];
      const std::size_t n = std::min<std::size_t>(1 + rng() % sizeof(chunk), kBytes - off);
      for (std::size_t i = 0; i < n; ++i) chunk[i] = byte_at(t, off + i);
      ssize_t w = ::send(streams[static_cast<std::size_t>(t)].writer, chunk, n, MSG_NOSIGNAL);
      if (w > 0) off += static_cast<std::size_t>(w);
      if (off == kBytes) --left;
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 120));
    }
  });
  for (auto& h : hs) EXPECT_EQ(h.wait(), std::optional<std::size_t>(kBytes));
  writer.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_GT(timeouts.load(), 0);
  std::printf("%ld reads, %ld timed out\n", reads.load(), timeouts.load());
  for (auto& s : streams) {
    s.reader.reset();
    ::close(s.writer);
  }
  EXPECT_TRUE(sg::testing::eventually([&] { return rings_idle(rt); })) << "operations or buffers left on the rings";
}

TEST_P(ReceiveStress, TasksDroppedHoldingReceivedBytesGiveEverythingBack) {
  SG_DRIVER_RUNTIME(rt, sg::testing::workers(3));
  constexpr int kTasks = 200;
  auto streams = make_streams(rt, kTasks);
  std::atomic<int> waiting{0};
  std::vector<exec::JoinHandle<void>> hs;
  for (int t = 0; t < kTasks; ++t) {
    hs.push_back(rt.spawn([&, t]() -> exec::Task<void> {
      TcpStream& s = *streams[static_cast<std::size_t>(t)].reader;
      waiting.fetch_add(1);
      // A third wait forever, the rest with deadlines that may fire while they are dropped;
      // woken waits leave their bytes untaken.
      Deadline dl = t % 3 == 0 ? Deadline::never() : Deadline::after(std::chrono::milliseconds(t % 4));
      for (;;) (void)co_await s.wait_readable(nullptr, dl);
    }));
  }
  ASSERT_TRUE(sg::testing::eventually([&] { return waiting.load() == kTasks; }));
  for (int t = 0; t < kTasks; t += 2) {
    ASSERT_EQ(::send(streams[static_cast<std::size_t>(t)].writer, "yz", 2, 0), 2);
  }
  for (auto& h : hs) h.cancel();
  for (auto& h : hs) EXPECT_FALSE(h.wait());
  // The streams (and their receives) are closed from the test thread: cancels and buffer
  // returns are queued to the rings.
  for (auto& s : streams) {
    s.reader.reset();
    ::close(s.writer);
  }
  EXPECT_TRUE(sg::testing::eventually([&] { return rings_idle(rt); })) << "operations or buffers left on the rings";
}

TEST_P(ReceiveStress, TaskToTaskStreamsThroughSendsAndReceivesArriveWholeAndInOrder) {
  SG_DRIVER_RUNTIME(rt, sg::testing::workers(3));
  constexpr int kPairs = 32;
  constexpr std::size_t kBytes = 200'000;
  std::vector<std::unique_ptr<TcpStream>> readers, writers;
  for (int i = 0; i < kPairs; ++i) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    readers.push_back(std::make_unique<TcpStream>(Socket::adopt(rt.context(), sv[0])));
    writers.push_back(std::make_unique<TcpStream>(Socket::adopt(rt.context(), sv[1])));
  }
  std::atomic<long> mismatches{0}, write_errors{0};
  std::vector<exec::JoinHandle<std::size_t>> got;
  std::vector<exec::JoinHandle<void>> sent;
  for (int t = 0; t < kPairs; ++t) {
    sent.push_back(rt.spawn([&, t]() -> exec::Task<void> {
      std::mt19937 rng(static_cast<unsigned>(1000 + t));
      std::vector<char> chunk(12'000);  // under and over the 8 KiB of a ring send
      for (std::size_t off = 0; off < kBytes;) {
        const std::size_t n = std::min<std::size_t>(1 + rng() % chunk.size(), kBytes - off);
        for (std::size_t i = 0; i < n; ++i) chunk[i] = byte_at(t, off + i);
        // Two pieces per write: the send gathers them.
        const std::size_t half = n / 2;
        std::string_view parts[] = {std::string_view(chunk.data(), half), std::string_view(chunk.data() + half, n - half)};
        if (co_await writers[static_cast<std::size_t>(t)]->write_all(std::span<const std::string_view>(parts))) {
          write_errors.fetch_add(1);
          co_return;
        }
        off += n;
        if (rng() % 3 == 0) co_await exec::yield_now();
      }
    }));
    got.push_back(rt.spawn([&, t]() -> exec::Task<std::size_t> {
      std::mt19937 rng(static_cast<unsigned>(t));
      TcpStream& s = *readers[static_cast<std::size_t>(t)];
      std::vector<char> buf(20'000);
      std::size_t have = 0;
      while (have < kBytes) {
        const std::size_t want = 1 + rng() % buf.size();
        IoResult r = co_await s.read_some(std::span<char>(buf.data(), want), Deadline::after(std::chrono::milliseconds(1 + rng() % 3)));
        if (r.ec == std::errc::timed_out) continue;
        if (r.ec || r.n == 0) break;
        for (std::size_t i = 0; i < r.n; ++i) {
          if (buf[i] != byte_at(t, have + i)) mismatches.fetch_add(1);
        }
        have += r.n;
      }
      co_return have;
    }));
  }
  for (auto& h : sent) EXPECT_TRUE(h.wait());
  for (auto& h : got) EXPECT_EQ(h.wait(), std::optional<std::size_t>(kBytes));
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(write_errors.load(), 0);
  readers.clear();
  writers.clear();
  EXPECT_TRUE(sg::testing::eventually([&] { return rings_idle(rt); })) << "operations or buffers left on the rings";
}

}  // namespace
}  // namespace sg::io
