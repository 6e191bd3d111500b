// OpenSSL's record buffers recycled per thread (io/openssl_memory.h). Its own main: the
// hooks must be installed before anything in the process calls OpenSSL.
#include "io/openssl_memory.h"

#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../../support/tls_peer.h"

namespace {

using sg::io::cached_record_buffers;
using sg::io::kRecordBufferCacheSize;
using sg::io::openssl_memory_alloc;
using sg::io::openssl_memory_free;
using sg::io::release_cached_record_buffers;

bool g_hooks_installed = false;

constexpr std::size_t kReadBuffer = 16712;   // OpenSSL 3's record buffers
constexpr std::size_t kWriteBuffer = 16584;

class RecordBuffers : public ::testing::Test {
 protected:
  void SetUp() override { release_cached_record_buffers(); }
  void TearDown() override { release_cached_record_buffers(); }
};

TEST_F(RecordBuffers, AFreedBufferServesTheNextRequestOfEitherSize) {
  void* read_buf = openssl_memory_alloc(kReadBuffer);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(read_buf) % 4096, 0u);  // how a free recognises it
  std::memset(read_buf, 1, kReadBuffer);
  openssl_memory_free(read_buf);
  EXPECT_EQ(cached_record_buffers(), kRecordBufferCacheSize > 0 ? 1u : 0u);
  void* write_buf = openssl_memory_alloc(kWriteBuffer);
  if (kRecordBufferCacheSize > 0) {
    EXPECT_EQ(write_buf, read_buf);
  }
  EXPECT_EQ(cached_record_buffers(), 0u);
  std::memset(write_buf, 2, kWriteBuffer);  // the whole request fits (ASan checks it)
  openssl_memory_free(write_buf);
}

TEST_F(RecordBuffers, OtherSizesGoStraightToMalloc) {
  for (std::size_t n : {std::size_t{0}, std::size_t{100}, std::size_t{16 * 1024}, std::size_t{18 * 1024},
                        std::size_t{64 * 1024}}) {
    void* p = openssl_memory_alloc(n);
    ASSERT_NE(p, nullptr);
    std::memset(p, 3, n);
    openssl_memory_free(p);
    EXPECT_EQ(cached_record_buffers(), 0u) << n;
  }
  openssl_memory_free(nullptr);
  void* aligned = nullptr;  // on a page, like a record buffer, but smaller
  ASSERT_EQ(posix_memalign(&aligned, 4096, 8192), 0);
  openssl_memory_free(aligned);
  EXPECT_EQ(cached_record_buffers(), 0u);
}

TEST_F(RecordBuffers, TheCacheIsBoundedAndReleaseEmptiesIt) {
  // A thread keeps at most kRecordBufferCacheSize, the shared depot as many again; the
  // rest are freed.
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < 3 * kRecordBufferCacheSize + 5; ++i) blocks.push_back(openssl_memory_alloc(kReadBuffer));
  for (void* p : blocks) openssl_memory_free(p);
  EXPECT_EQ(cached_record_buffers(), kRecordBufferCacheSize);
  EXPECT_EQ(release_cached_record_buffers(), 2 * kRecordBufferCacheSize * 17 * 1024);
  EXPECT_EQ(cached_record_buffers(), 0u);
  EXPECT_EQ(release_cached_record_buffers(), 0u);  // the depot was emptied too
}

TEST_F(RecordBuffers, BuffersAThreadHasTooManyOfServeAnotherThread) {
  // Work stealing frees a connection's buffers on the worker that did not allocate them:
  // the freeing thread's overflow goes to the depot, where the other thread finds it.
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < kRecordBufferCacheSize + 1; ++i) blocks.push_back(openssl_memory_alloc(kReadBuffer));
  std::thread other([&] {
    for (void* p : blocks) openssl_memory_free(p);
  });  // its exit frees what it kept itself, not the depot
  other.join();
  EXPECT_EQ(cached_record_buffers(), 0u);
  void* again = openssl_memory_alloc(kWriteBuffer);
  if (kRecordBufferCacheSize > 0) {
    EXPECT_NE(std::find(blocks.begin(), blocks.end(), again), blocks.end());
    EXPECT_EQ(cached_record_buffers(), kRecordBufferCacheSize / 2 - 1);  // half a stack came over
  }
  openssl_memory_free(again);
}

TEST_F(RecordBuffers, ABufferFreedOnAnotherThreadJoinsThatThreadsCache) {
  void* p = openssl_memory_alloc(kReadBuffer);
  std::size_t cached_there = 99;
  std::thread other([&] {
    openssl_memory_free(p);
    cached_there = cached_record_buffers();
  });  // the thread's exit frees what it cached
  other.join();
  EXPECT_EQ(cached_there, kRecordBufferCacheSize > 0 ? 1u : 0u);
  EXPECT_EQ(cached_record_buffers(), 0u);
}

// Runs both ends' handshakes over a BIO pair until both are done.
bool handshake(SSL* client, SSL* server) {
  for (int i = 0; i < 20; ++i) {
    const int c = SSL_do_handshake(client);
    const int s = SSL_do_handshake(server);
    if (c == 1 && s == 1) return true;
  }
  return false;
}

TEST(OpenSslMemoryHooks, RecordBuffersOfARealSessionAreRecycled) {
  ASSERT_TRUE(g_hooks_installed) << "OpenSSL allocated before main installed the hooks";
  release_cached_record_buffers();
  sg::testing::TestTls tls;
  SSL_CTX_set_mode(tls.server(), SSL_MODE_RELEASE_BUFFERS);  // as the gateway's contexts
  SSL* server = SSL_new(tls.server());
  SSL* client = SSL_new(tls.client());
  BIO* to_server = nullptr;
  BIO* to_client = nullptr;
  ASSERT_EQ(BIO_new_bio_pair(&to_server, 0, &to_client, 0), 1);
  SSL_set_bio(client, to_server, to_server);
  SSL_set_bio(server, to_client, to_client);
  SSL_set_connect_state(client);
  SSL_set_accept_state(server);
  ASSERT_TRUE(handshake(client, server));

  // A request and its answer, twice: the server gives its buffers back after each record
  // and takes them again from this thread's cache for the next.
  for (int round = 0; round < 2; ++round) {
    const std::string request = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    std::size_t n = 0;
    ASSERT_EQ(SSL_write_ex(client, request.data(), request.size(), &n), 1);
    char buf[256];
    ASSERT_EQ(SSL_read_ex(server, buf, sizeof buf, &n), 1);
    EXPECT_EQ(std::string(buf, n), request);
    EXPECT_EQ(SSL_read_ex(server, buf, sizeof buf, &n), 0);  // nothing more: the buffer goes back
    if (kRecordBufferCacheSize > 0) {
      EXPECT_GE(cached_record_buffers(), 1u) << "round " << round;
    }
    ASSERT_EQ(SSL_write_ex(server, "ok", 2, &n), 1);
    ASSERT_EQ(SSL_read_ex(client, buf, sizeof buf, &n), 1);
    EXPECT_EQ(std::string(buf, n), "ok");
  }
  EXPECT_LE(cached_record_buffers(), kRecordBufferCacheSize);

  SSL_free(client);
  SSL_free(server);
}

}  // namespace

int main(int argc, char** argv) {
  g_hooks_installed = sg::io::install_openssl_memory_hooks();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
