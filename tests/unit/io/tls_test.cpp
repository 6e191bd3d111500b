// io::Stream with TLS (io/tls.h) on both drivers, against a blocking OpenSSL client: bytes
// both ways through the handshake and records of every size; a close_notify is a close to
// peek(); plaintext that TLS already holds makes the stream readable without a wait; a
// silent client times out the handshake and plain HTTP is told apart.
#include <gtest/gtest.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "io/runtime.h"
#include "io/stream.h"
#include "../../support/io_drivers.h"
#include "../../support/stream_pair.h"
#include "../../support/tls_peer.h"
#include "../../support/workers.h"

namespace sg::io {
namespace {

using namespace std::chrono_literals;
using sg::testing::pattern;
using sg::testing::TestTls;
using sg::testing::TlsClient;

class Tls : public ::testing::TestWithParam<IoDriverKind> {};
INSTANTIATE_TEST_SUITE_P(Drivers, Tls, sg::testing::kDrivers, sg::testing::driver_test_name);

// A stream on one end of a socket pair (non-blocking, for the runtime) and the other end's
// descriptor (blocking, for a client thread).
struct TlsPair {
  Stream stream;
  int peer = -1;
};

TlsPair make_tls_pair(Runtime& rt) {
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  int fl = 1;
  EXPECT_EQ(::ioctl(sv[0], FIONBIO, &fl), 0);
  auto s = Socket::adopt(rt.context(), sv[0]);
  return TlsPair{Stream(TcpStream(std::move(s))), sv[1]};
}

TEST_P(Tls, BytesOfEverySizeCrossBothWays) {
  SG_DRIVER_RUNTIME(rt, sg::testing::workers(2));
  TestTls tls;
  TlsPair p = make_tls_pair(rt);
  const std::string up = pattern(300'000, 1);
  std::string echoed;
  std::thread client([&] {
    TlsClient c(tls.client(), p.peer);
    if (!c.handshake()) return;
    // Pieces of growing size, each echoed before the next: records from 1 byte to 64 KiB.
    for (std::size_t off = 0, n = 1; off < up.size(); off += n, n = std::min<std::size_t>(n * 2, 65536)) {
      std::string piece = up.substr(off, n);
      if (!c.write(piece)) return;
      echoed += c.read(piece.size());
    }
    c.close_notify();
  });
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    if (auto ec = co_await p.stream.accept_tls(tls.server(), nullptr, Deadline::after(10s))) co_return "handshake: " + ec.message();
    char buf[7000];
    for (;;) {
      IoResult r = co_await p.stream.read_some(buf, Deadline::after(10s));
      if (r.ec) co_return "read: " + r.ec.message();
      if (r.n == 0) co_return "ok";  // close_notify
      if (auto ec = co_await p.stream.write_all(std::string_view(buf, r.n), Deadline::after(10s))) {
        co_return "write: " + ec.message();
      }
    }
  });
  EXPECT_EQ(h.wait(), "ok");
  client.join();
  EXPECT_EQ(echoed.size(), up.size());
  EXPECT_TRUE(echoed == up) << "bytes changed or reordered";
  EXPECT_EQ(p.stream.tls()->summary().version, "TLSv1.3");
}

// An idle connection gives back the write buffers, the read scratch and the ciphertext
// buffers (what a keep-alive connection does between requests), and the stream works on
// afterwards.
TEST_P(Tls, BuffersOfARequestInProgressAreGivenBackWhenIdle) {
  SG_DRIVER_RUNTIME(rt, sg::testing::workers(1));
  TestTls tls;
  TlsPair p = make_tls_pair(rt);
  std::thread client([&] {
    TlsClient c(tls.client(), p.peer);
    if (!c.handshake()) return;
    for (int round = 0; round < 2; ++round) {
      if (!c.write("ping")) return;
      if (c.read(3000) != pattern(3000, round)) return;
    }
    c.close_notify();
  });
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    if (auto ec = co_await p.stream.accept_tls(tls.server(), nullptr, Deadline::after(10s))) co_return "handshake: " + ec.message();
    std::string log;
    for (int round = 0; round < 2; ++round) {
      char small[16];  // below the size TLS reads ciphertext into: the read goes through the scratch
      IoResult r = co_await p.stream.read_some(small, Deadline::after(10s));
      if (r.ec || std::string_view(small, r.n) != "ping") co_return "read failed";
      const std::string body = pattern(3000, round);
      const std::string_view pieces[] = {std::string_view(body).substr(0, 100), std::string_view(body).substr(100)};
      if (auto ec = co_await p.stream.write_all(pieces, Deadline::after(10s))) co_return "write: " + ec.message();
      log += std::to_string(p.stream.tls()->idle_releasable_bytes() > 0) + " ";
      p.stream.release_idle_buffers();
      log += std::to_string(p.stream.tls()->idle_releasable_bytes()) + " ";
    }
    co_return log;
  });
  EXPECT_EQ(h.wait(), "1 0 1 0 ");
  client.join();
}

TEST_P(Tls, ACloseNotifyIsAPeerCloseAndPlaintextIsNot) {
  SG_DRIVER_RUNTIME(rt, sg::testing::workers(1));
  TestTls tls;
  TlsPair p = make_tls_pair(rt);
  std::atomic<int> step{0};
  std::thread client([&] {
    TlsClient c(tls.client(), p.peer);
    if (!c.handshake()) return;
    while (step.load() < 1) std::this_thread::sleep_for(1ms);
    c.write("pipelined");
    while (step.load() < 2) std::this_thread::sleep_for(1ms);
    c.close_notify();  // the TCP connection stays open: only TLS says goodbye
    while (step.load() < 3) std::this_thread::sleep_for(1ms);
  });
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    if (co_await p.stream.accept_tls(tls.server(), nullptr, Deadline::after(10s))) co_return "handshake failed";
    if (p.stream.peek() != Stream::PeerState::kSilent) co_return "not silent after the handshake";
    step = 1;
    while (p.stream.peek() == Stream::PeerState::kSilent) co_await exec::sleep_for(1ms);
    if (p.stream.peek() != Stream::PeerState::kData) co_return "plaintext not seen as data";
    char buf[64];
    IoResult r = co_await p.stream.read_some(buf, Deadline::after(5s));  // peek consumed nothing
    if (std::string_view(buf, r.n) != "pipelined") co_return "lost the peeked bytes";
    step = 2;
    while (p.stream.peek() == Stream::PeerState::kSilent) co_await exec::sleep_for(1ms);
    if (!p.stream.peer_closed()) co_return "close_notify not seen as a close";
    r = co_await p.stream.read_some(buf, Deadline::after(5s));
    co_return r.ec || r.n != 0 ? "a read after close_notify is not EOF" : "ok";
  });
  EXPECT_EQ(h.wait(), "ok");
  step = 3;
  client.join();
}

TEST_P(Tls, PlaintextAlreadyDecryptedMakesTheStreamReadableAtOnce) {
  SG_DRIVER_RUNTIME(rt, sg::testing::workers(1));
  TestTls tls;
  TlsPair p = make_tls_pair(rt);
  std::thread client([&] {
    TlsClient c(tls.client(), p.peer);
    if (!c.handshake()) return;
    c.write(pattern(5000, 3));  // one record
    c.read(1);                  // wait for the test to finish
  });
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    if (co_await p.stream.accept_tls(tls.server(), nullptr, Deadline::after(10s))) co_return "handshake failed";
    char small[100];
    IoResult r = co_await p.stream.read_some(small, Deadline::after(5s));
    if (r.ec || r.n == 0) co_return "first read failed";
    std::size_t total = r.n;
    // The rest of the record is held by TLS: the socket has nothing, yet the wait must end
    // at once, and reads without waiting must deliver it.
    EitherReadable w = co_await p.stream.wait_readable(nullptr, Deadline::after(50ms));
    if (w.ec || w.which != 0) co_return "waited for the socket although TLS held plaintext";
    while (auto got = p.stream.try_read(small)) {
      if (got->ec || got->n == 0) co_return "try_read failed";
      total += got->n;
    }
    co_await p.stream.write_all("x", Deadline::after(5s));
    co_return total == 5000 ? "ok" : "got " + std::to_string(total) + " bytes";
  });
  EXPECT_EQ(h.wait(), "ok");
  client.join();
}

TEST_P(Tls, ASilentClientTimesOutTheHandshake) {
  SG_DRIVER_RUNTIME(rt, sg::testing::workers(1));
  TestTls tls;
  TlsPair p = make_tls_pair(rt);
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    auto ec = co_await p.stream.accept_tls(tls.server(), nullptr, Deadline::after(50ms));
    if (ec != std::errc::timed_out) co_return "expected a timeout, got " + ec.message();
    co_return std::string(p.stream.tls()->failure_kind());
  });
  EXPECT_EQ(h.wait(), "timeout");
  ::close(p.peer);
}

TEST_P(Tls, PlainHttpIsToldApartFromABrokenHandshake) {
  SG_DRIVER_RUNTIME(rt, sg::testing::workers(1));
  TestTls tls;
  TlsPair p = make_tls_pair(rt);
  const std::string get = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(p.peer, get.data(), get.size(), 0), static_cast<ssize_t>(get.size()));
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    auto ec = co_await p.stream.accept_tls(tls.server(), nullptr, Deadline::after(5s));
    if (!ec) co_return "a plain request passed the handshake";
    co_return std::string(p.stream.tls()->failure_kind());
  });
  EXPECT_EQ(h.wait(), "not_tls");
  ::close(p.peer);
}

}  // namespace
}  // namespace sg::io
