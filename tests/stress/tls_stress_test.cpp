// One TLS stream read by one task and written by another at the same time, as an upgrade
// tunnel does (io/tls.h: every OpenSSL call under the session's lock, only the writer
// empties the output), on three workers so that the two tasks run in parallel and get
// stolen; under ThreadSanitizer in the test command. Blocking OpenSSL clients echo what
// they receive; each writer sends numbered bytes in pieces of random size and its reader
// must get them back complete and in order.
#include <gtest/gtest.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "io/runtime.h"
#include "io/stream.h"
#include "../support/io_drivers.h"
#include "../support/tls_peer.h"
#include "../support/workers.h"

namespace sg::io {
namespace {

using namespace std::chrono_literals;

class TlsStress : public ::testing::TestWithParam<IoDriverKind> {};
INSTANTIATE_TEST_SUITE_P(Drivers, TlsStress, sg::testing::kDrivers, sg::testing::driver_test_name);

constexpr std::size_t kConnections = 6;
constexpr std::size_t kBytes = 300'000;

char byte_at(std::size_t conn, std::size_t i) { return static_cast<char>((i * 31 + conn * 7) % 251); }

TEST_P(TlsStress, AReaderAndAWriterShareEachStream) {
  SG_DRIVER_RUNTIME(rt, sg::testing::workers(3));
  sg::testing::TestTls tls;
  std::vector<std::thread> clients;
  std::vector<std::unique_ptr<Stream>> streams;
  for (std::size_t c = 0; c < kConnections; ++c) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    int on = 1;
    ASSERT_EQ(::ioctl(sv[0], FIONBIO, &on), 0);
    streams.push_back(std::make_unique<Stream>(TcpStream(Socket::adopt(rt.context(), sv[0]))));
    clients.emplace_back([&tls, fd = sv[1]] {
      sg::testing::TlsClient client(tls.client(), fd);
      if (!client.handshake()) return;
      for (std::size_t echoed = 0; echoed < kBytes;) {
        std::string got = client.read(std::min<std::size_t>(4096, kBytes - echoed));
        if (got.empty() || !client.write(got)) return;
        echoed += got.size();
      }
    });
  }
  // The handshakes, then per stream a writer task and a reader task (spawned apart, so a
  // thief may run one while its owner runs the other).
  std::vector<exec::JoinHandle<std::string>> handles;
  for (std::size_t c = 0; c < kConnections; ++c) {
    Stream& s = *streams[c];
    SSL_CTX* server = tls.server();
    handles.push_back(rt.spawn([&s, server]() -> exec::Task<std::string> {
      auto ec = co_await s.accept_tls(server, nullptr, Deadline::after(20s));
      co_return ec ? "handshake: " + ec.message() : "ok";
    }));
  }
  for (auto& h : handles) ASSERT_EQ(h.wait(), "ok");
  handles.clear();
  for (std::size_t c = 0; c < kConnections; ++c) {
    Stream& s = *streams[c];
    handles.push_back(rt.spawn([&s, c]() -> exec::Task<std::string> {
      std::mt19937 rng(static_cast<uint32_t>(c));
      std::string piece;
      for (std::size_t off = 0; off < kBytes;) {
        const std::size_t n = std::min<std::size_t>(1 + rng() % 12000, kBytes - off);
        piece.resize(n);
        for (std::size_t i = 0; i < n; ++i) piece[i] = byte_at(c, off + i);
        if (auto ec = co_await s.write_all(piece, Deadline::after(20s))) co_return "write: " + ec.message();
        off += n;
        if (rng() % 4 == 0) co_await exec::yield_now();
      }
      co_return "ok";
    }));
    handles.push_back(rt.spawn([&s, c]() -> exec::Task<std::string> {
      std::mt19937 rng(static_cast<uint32_t>(c + 100));
      std::vector<char> buf(20000);
      for (std::size_t got = 0; got < kBytes;) {
        const std::size_t want = 1 + rng() % buf.size();
        IoResult r = co_await s.read_some(std::span<char>(buf.data(), want), Deadline::after(20s));
        if (r.ec || r.n == 0) co_return "read ended early at " + std::to_string(got);
        for (std::size_t i = 0; i < r.n; ++i) {
          if (buf[i] != byte_at(c, got + i)) co_return "byte " + std::to_string(got + i) + " differs";
        }
        got += r.n;
        if (rng() % 4 == 0) co_await exec::yield_now();
      }
      co_return "ok";
    }));
  }
  for (auto& h : handles) EXPECT_EQ(h.wait(), "ok");
  for (auto& t : clients) t.join();
  for (auto& s : streams) s->close();
}

}  // namespace
}  // namespace sg::io
