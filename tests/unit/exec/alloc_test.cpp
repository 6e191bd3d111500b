// The task allocator's trim: wholly free slabs are unmapped, a slab with one live
// block stays, blocks freed by other threads count as free, and the cache keeps working.
#include "exec/alloc.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace sg::exec {
namespace {

// A size no other code in this test binary allocates between the calls below, so the
// class's slabs are this test's alone (a frame size just under 8 KiB).
constexpr std::size_t kBytes = 7 * 1024 + 100;

std::vector<void*> allocate(std::size_t n) {
  std::vector<void*> v;
  for (std::size_t i = 0; i < n; ++i) v.push_back(task_alloc(kBytes));
  return v;
}

TEST(TaskAllocTrim, ReleasesWhollyFreeSlabsOnly) {
  if (!kTaskAllocPooled) GTEST_SKIP() << "AddressSanitizer build: task memory is plain malloc, there is no pool to trim";
  task_cache_trim();
  const std::size_t before = task_cache_slab_bytes();
  std::vector<void*> blocks = allocate(64);  // several slabs of 8 blocks
  const std::size_t grown = task_cache_slab_bytes() - before;
  ASSERT_GE(grown, 64 * kBytes);
  void* keep = blocks[5];
  for (void* p : blocks) {
    if (p != keep) task_free(p, kBytes);
  }
  const std::size_t released = task_cache_trim();
  // Everything but the slab holding `keep` went back; that one stays with it.
  EXPECT_GT(released, 0u);
  EXPECT_LT(released, grown);
  EXPECT_EQ(task_cache_slab_bytes(), before + grown - released);
  EXPECT_EQ(task_cache_trim(), 0u) << "nothing more is wholly free";

  // The kept block is intact and the cache still serves this class.
  std::memset(keep, 0x5a, kBytes);
  std::vector<void*> again = allocate(16);
  for (void* p : again) std::memset(p, 0xa5, kBytes);
  EXPECT_EQ(static_cast<unsigned char*>(keep)[kBytes - 1], 0x5a);
  for (void* p : again) task_free(p, kBytes);
  task_free(keep, kBytes);
  task_cache_trim();
  EXPECT_EQ(task_cache_slab_bytes(), before);
}

// task_memory_bytes() (the /metrics gauge) is every thread's task_cache_slab_bytes()
// together: it rises as a thread carves blocks and falls by what trim gives back.
TEST(TaskAllocTrim, ProcessWideFigureFollowsEveryThreadsSlabs) {
  if (!kTaskAllocPooled) GTEST_SKIP() << "AddressSanitizer build: task memory is plain malloc, there are no slabs";
  enable_task_cache();
  task_cache_trim();
  const std::size_t all_before = task_memory_bytes();
  const std::size_t mine_before = task_cache_slab_bytes();
  std::vector<void*> blocks = allocate(64);
  const std::size_t mine_grown = task_cache_slab_bytes() - mine_before;
  ASSERT_GE(mine_grown, 64 * kBytes);
  EXPECT_EQ(task_memory_bytes(), all_before + mine_grown);

  // Another thread's carving counts too. (It may adopt an exited thread's cache, with its
  // slabs: adopted and trimmed first, so that they do not blur its own figures.)
  std::size_t theirs_grown = 0, theirs_released = 0, all_at_start = 0, all_while_theirs = 0, all_after = 0;
  std::thread([&] {
    enable_task_cache();  // adopts an exited thread's cache now, if there is one
    task_cache_trim();
    all_at_start = task_memory_bytes();
    const std::size_t base = task_cache_slab_bytes();
    std::vector<void*> other = allocate(24);
    theirs_grown = task_cache_slab_bytes() - base;
    all_while_theirs = task_memory_bytes();
    for (void* p : other) task_free(p, kBytes);
    theirs_released = task_cache_trim();
    all_after = task_memory_bytes();
  }).join();
  EXPECT_GE(theirs_grown, 24 * kBytes);
  EXPECT_EQ(all_while_theirs, all_at_start + theirs_grown);
  EXPECT_EQ(theirs_released, theirs_grown);
  EXPECT_EQ(all_after, all_at_start);

  const std::size_t all_now = task_memory_bytes();
  for (void* p : blocks) task_free(p, kBytes);
  EXPECT_EQ(task_cache_trim(), mine_grown);
  EXPECT_EQ(task_memory_bytes(), all_now - mine_grown);
}

// Blocks carry no header: a fresh slab's blocks sit one class size apart, after the
// 512 bytes at the start of its 64 KiB-aligned mapping that hold the slab's header, and
// are carved only as they are needed (the slab's untouched pages are not counted, nor
// resident).
TEST(TaskAllocTrim, BlocksArePackedInAlignedSlabs) {
  if (!kTaskAllocPooled) GTEST_SKIP() << "AddressSanitizer build: task memory is plain malloc, there are no slabs";
  task_cache_trim();
  const std::size_t before = task_cache_slab_bytes();
  constexpr std::size_t kClassBytes = 7 * 1024 + 256;  // the class of kBytes
  std::vector<void*> blocks = allocate(2);
  const auto first = reinterpret_cast<uintptr_t>(blocks[0]);
  EXPECT_EQ(first % kAllocSlabBytes, 512u) << "the first block follows the header area";
  EXPECT_EQ(reinterpret_cast<uintptr_t>(blocks[1]) - first, kClassBytes);
  EXPECT_EQ(task_cache_slab_bytes() - before, 16u * 1024) << "two blocks touch 4 pages, not the slab's 16";
  for (void* p : blocks) task_free(p, kBytes);
  EXPECT_EQ(task_cache_trim(), 16u * 1024);
  EXPECT_EQ(task_cache_slab_bytes(), before);
}

TEST(TaskAllocTrim, CountsBlocksFreedByOtherThreads) {
  if (!kTaskAllocPooled) GTEST_SKIP() << "AddressSanitizer build: task memory is plain malloc, there is no pool to trim";
  task_cache_trim();
  const std::size_t before = task_cache_slab_bytes();
  std::vector<void*> blocks = allocate(32);
  ASSERT_GT(task_cache_slab_bytes(), before);
  // Freed elsewhere: they sit on this cache's remote stacks until trim takes them.
  std::thread([&] {
    for (void* p : blocks) task_free(p, kBytes);
  }).join();
  EXPECT_GT(task_cache_trim(), 0u);
  EXPECT_EQ(task_cache_slab_bytes(), before);
}

}  // namespace
}  // namespace sg::exec
