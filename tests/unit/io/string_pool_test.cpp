// String buffers kept per thread (io/string_pool.h).
#include "io/string_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

namespace {

using sg::io::adopt_pooled_buffer;
using sg::io::kPooledStringCapacity;
using sg::io::kPooledStringMaxCapacity;
using sg::io::kPooledStringsPerThread;
using sg::io::pooled_buffers;
using sg::io::PooledString;
using sg::io::recycle_buffer;
using sg::io::release_pooled_buffers;

constexpr bool kPooling = kPooledStringsPerThread > 0;  // not under ASan

class StringPool : public ::testing::Test {
 protected:
  void SetUp() override { release_pooled_buffers(); }
  void TearDown() override { release_pooled_buffers(); }
};

TEST_F(StringPool, ARecycledBufferServesTheNextString) {
  std::string a;
  adopt_pooled_buffer(a);
  EXPECT_GE(a.capacity(), kPooledStringCapacity);
  a.assign(300, 'x');
  const char* buffer = a.data();
  recycle_buffer(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(pooled_buffers(), kPooling ? 1u : 0u);

  std::string b;
  adopt_pooled_buffer(b);
  EXPECT_TRUE(b.empty());
  if (kPooling) {
    EXPECT_EQ(b.data(), buffer);
  }
  EXPECT_EQ(pooled_buffers(), 0u);
  recycle_buffer(b);
}

TEST_F(StringPool, AStringWithABufferKeepsIt) {
  std::string s;
  s.reserve(1000);
  const char* buffer = s.data();
  adopt_pooled_buffer(s);
  EXPECT_EQ(s.data(), buffer);
  recycle_buffer(s);
}

TEST_F(StringPool, InlineAndOversizedStringsAreNotKept) {
  std::string small = "tiny";  // no heap buffer
  recycle_buffer(small);
  EXPECT_TRUE(small.empty());
  std::string big(kPooledStringMaxCapacity + 1, 'x');
  recycle_buffer(big);
  EXPECT_TRUE(big.empty());
  EXPECT_LE(big.capacity(), std::string().capacity());  // freed, not kept
  EXPECT_EQ(pooled_buffers(), 0u);
}

TEST_F(StringPool, ThePoolIsBoundedAndReleaseEmptiesIt) {
  // A thread keeps at most kPooledStringsPerThread, the shared depot as many again.
  std::vector<std::string> strings(3 * kPooledStringsPerThread + 3);
  for (std::string& s : strings) adopt_pooled_buffer(s);
  for (std::string& s : strings) recycle_buffer(s);
  EXPECT_EQ(pooled_buffers(), kPooledStringsPerThread);
  EXPECT_GE(release_pooled_buffers(), 2 * kPooledStringsPerThread * kPooledStringCapacity);
  EXPECT_LT(release_pooled_buffers(), kPooledStringCapacity);  // nothing left, depot included
  EXPECT_EQ(pooled_buffers(), 0u);
}

TEST_F(StringPool, BuffersAThreadHasTooManyOfServeAnotherThread) {
  // The other worker's overflow (work stealing frees buffers where they were not made)
  // reaches this thread through the depot.
  std::vector<std::string> strings(kPooledStringsPerThread + 1);
  for (std::string& s : strings) adopt_pooled_buffer(s);
  std::vector<const char*> buffers;
  for (const std::string& s : strings) buffers.push_back(s.data());
  std::thread other([&] {
    for (std::string& s : strings) recycle_buffer(s);
  });  // its exit frees its own pool, not the depot
  other.join();
  EXPECT_EQ(pooled_buffers(), 0u);
  std::string again;
  adopt_pooled_buffer(again);
  if (kPooling) {
    EXPECT_NE(std::find(buffers.begin(), buffers.end(), again.data()), buffers.end());
    EXPECT_EQ(pooled_buffers(), kPooledStringsPerThread / 2 - 1);
  }
}

TEST_F(StringPool, ABufferRecycledOnAnotherThreadJoinsThatThreadsPool) {
  PooledString* s = new PooledString;
  s->str() = "a request head that needs a heap buffer";
  std::size_t pooled_there = 99;
  std::thread other([&] {
    delete s;
    pooled_there = pooled_buffers();
  });  // the thread's exit frees its pool
  other.join();
  EXPECT_EQ(pooled_there, kPooling ? 1u : 0u);
  EXPECT_EQ(pooled_buffers(), 0u);
}

}  // namespace
