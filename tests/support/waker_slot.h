// A place where a test's wait leaves its Waker, for another thread to complete (or drop).
#pragma once

#include <mutex>
#include <system_error>
#include <utility>

#include "exec/coro.h"

namespace sg::testing {

struct WakerSlot {
  std::mutex mu;
  exec::Waker waker;

  void put(exec::Waker w) {
    std::lock_guard lk(mu);
    waker = std::move(w);
  }
  bool armed() {
    std::lock_guard lk(mu);
    return static_cast<bool>(waker);
  }
  exec::Waker take() {
    std::lock_guard lk(mu);
    return std::move(waker);
  }
  // Completes the wait left here, if any, with `value`; true when this completed it.
  bool fire(std::size_t value) { return take().wake({std::error_code{}, value}); }
};

}  // namespace sg::testing
