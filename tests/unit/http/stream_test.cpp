// MessageReader over a real loopback connection: a head and a small body that arrive
// together are handed over together (top_up), top_up never waits for bytes that are not
// there, and skip_arrived_body takes a body only when it is here whole.
#include "http/stream.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "io/runtime.h"
#include "io/stream.h"
#include "../../support/loopback.h"

namespace sg::http {
namespace {

using namespace std::chrono_literals;
using sg::testing::connect_loopback;

struct Got {
  std::size_t body_bytes = 0;
  bool done = false;
  bool ok = false;
};

// Sends `bytes` in one write (so they are all in the server's receive queue before it
// reads), accepts the connection, reads a request head and hands the reader to `then`
// (a callable returning exec::Task<T>); `failed` when any step before `then` fails.
template <class T, class Then>
T after_head(const std::string& bytes, T failed, Then&& then) {
  io::Runtime rt(exec::RuntimeConfig{});
  auto listener = io::TcpListener::bind(rt.context(), io::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), {});
  EXPECT_TRUE(listener.ok());
  int fd = connect_loopback(listener->local_endpoint().port());
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::send(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  auto h = rt.spawn([&, l = std::move(*listener)]() mutable -> exec::Task<T> {
    auto s = co_await l.accept();
    if (!s.ok()) co_return failed;
    io::Stream stream(std::move(*s));
    MessageReader reader(stream, Parser::Mode::kRequest, ParserLimits{});
    HeadRead hr = co_await reader.read_head(io::Deadline::after(2s), 2s);
    if (hr.status != ReadStatus::kOk) co_return failed;
    co_return co_await then(reader);
  });
  T r = h.wait().value_or(failed);
  ::close(fd);
  return r;
}

// Reads a request head, optionally tops up, and reports what buffered_body() hands over
// without further I/O.
Got read_request(const std::string& bytes, bool top_up) {
  return after_head(bytes, Got{}, [top_up](MessageReader& reader) -> exec::Task<Got> {
    if (top_up) reader.top_up(reader.parser().request().body);
    BodyRead b = reader.buffered_body();
    Got g;
    g.ok = b.status == ReadStatus::kOk;
    g.done = b.done;
    for (auto c : b.chunks) g.body_bytes += c.size();
    co_return g;
  });
}

std::string post(std::size_t n) {
  return "POST /u HTTP/1.1\r\nHost: h\r\nContent-Length: " + std::to_string(n) + "\r\n\r\n" + std::string(n, 'b');
}

TEST(MessageReader, TopUpHandsOverASmallBodyThatArrivedWithItsHead) {
  Got without = read_request(post(10000), false);
  ASSERT_TRUE(without.ok);
  EXPECT_FALSE(without.done) << "the first read is a 4 KiB one: the test needs a body it cannot hold";
  Got with = read_request(post(10000), true);
  ASSERT_TRUE(with.ok);
  EXPECT_TRUE(with.done);
  EXPECT_EQ(with.body_bytes, 10000u);
}

TEST(MessageReader, TopUpDoesNotWaitForABodyStillOnItsWay) {
  // Content-Length says 20000 but only 6000 body bytes were sent: top_up takes what is
  // there and returns (the test would hang on a wait otherwise).
  std::string head_and_part = post(20000).substr(0, post(20000).size() - 14000);
  Got g = read_request(head_and_part, true);
  ASSERT_TRUE(g.ok);
  EXPECT_FALSE(g.done);
  EXPECT_EQ(g.body_bytes, 6000u);
}

TEST(MessageReader, TopUpLeavesASmallRequestAlone) {
  Got g = read_request(post(100), true);
  ASSERT_TRUE(g.ok);
  EXPECT_TRUE(g.done);
  EXPECT_EQ(g.body_bytes, 100u);
}

// Counts the read_body calls that take a body which is already in the socket whole.
int reads_to_take(const std::string& bytes, std::size_t body) {
  return after_head(bytes, -1, [body](MessageReader& reader) -> exec::Task<int> {
    std::size_t got = 0;
    for (auto c : reader.buffered_body().chunks) got += c.size();
    int reads = 0;
    while (got < body) {
      BodyRead b = co_await reader.read_body(io::Deadline::after(2s));
      if (b.status != ReadStatus::kOk) co_return -1;
      for (auto c : b.chunks) got += c.size();
      ++reads;
    }
    co_return got == body ? reads : -1;
  });
}

TEST(MessageReader, ABodyStreamsInReadsOfUpTo64KiB) {
  // A 60,000-byte body already in the socket: one read of up to 64 KiB takes it (on
  // io_uring a receive may hold the first few KiB: two). With 16 KiB reads a relayed GET
  // of 64 KiB cost four recvs and four sends where nginx needs one readv and one writev.
  const int reads = reads_to_take(post(60000), 60000);
  EXPECT_GE(reads, 1);
  EXPECT_LE(reads, 2);
}

// skip_arrived_body's answer, and the bytes it left buffered after the message.
struct Skipped {
  bool complete = false;
  std::string after;
};

Skipped skip(const std::string& bytes) {
  return after_head(bytes, Skipped{false, "failed"}, [](MessageReader& reader) -> exec::Task<Skipped> {
    const bool complete = reader.skip_arrived_body();
    co_return Skipped{complete, std::string(reader.buffered())};
  });
}

TEST(MessageReader, SkipArrivedBodyTakesABodyThatIsHereWholeAndNoMore) {
  const std::string next = "GET /next HTTP/1.1\r\nHost: h\r\n\r\n";
  Skipped small = skip(post(100) + next);
  EXPECT_TRUE(small.complete);
  EXPECT_EQ(small.after, next);  // the pipelined request is left for the next read_head
  Skipped larger = skip(post(10000) + next);  // beyond the head's 4 KiB read: read from the socket
  EXPECT_TRUE(larger.complete);
  EXPECT_EQ(larger.after.substr(0, 4), "GET ");
  Skipped chunked = skip("PUT /u HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
  EXPECT_TRUE(chunked.complete);
}

TEST(MessageReader, SkipArrivedBodyRefusesWhatIsNotHereOrTooLongOrMalformed) {
  EXPECT_FALSE(skip(post(20000).substr(0, post(20000).size() - 14000)).complete);  // never waits
  EXPECT_FALSE(skip(post(MessageReader::kMostSkipped + 70000)).complete);           // more than it takes
  EXPECT_FALSE(skip("PUT /u HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").complete);
}

}  // namespace
}  // namespace sg::http
