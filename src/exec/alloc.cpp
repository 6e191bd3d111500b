#include "exec/alloc.h"

#include <cstdlib>
#include <new>

namespace sg::exec {

namespace {

struct FreeBlock {
  FreeBlock* next;
};

struct ThreadCache {
  FreeBlock* head[kAllocClasses] = {};
  std::size_t count[kAllocClasses] = {};
  bool alive = true;

  ~ThreadCache() {
    alive = false;
    for (std::size_t c = 0; c < kAllocClasses; ++c) {
      while (FreeBlock* b = head[c]) {
        head[c] = b->next;
        std::free(b);
      }
    }
  }
};

thread_local ThreadCache tl_cache;

constexpr std::size_t class_of(std::size_t bytes) {
  return (bytes + kAllocClassBytes - 1) / kAllocClassBytes - 1;
}

}  // namespace

void* task_alloc(std::size_t bytes) {
  std::size_t c = class_of(bytes);
  if (c < kAllocClasses && tl_cache.alive) {
    if (FreeBlock* b = tl_cache.head[c]) {
      tl_cache.head[c] = b->next;
      --tl_cache.count[c];
      return b;
    }
    bytes = (c + 1) * kAllocClassBytes;
  }
  void* p = std::malloc(bytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void task_free(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  std::size_t c = class_of(bytes);
  if (c < kAllocClasses && tl_cache.alive && tl_cache.count[c] < kAllocCacheDepth) {
    auto* b = static_cast<FreeBlock*>(p);
    b->next = tl_cache.head[c];
    tl_cache.head[c] = b;
    ++tl_cache.count[c];
    return;
  }
  std::free(p);
}

}  // namespace sg::exec
