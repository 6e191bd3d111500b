// Bounded polling for conditions that other threads (tasks, workers) make true.
#pragma once

#include <chrono>
#include <thread>

namespace sg::testing {

// Waits until f() holds, polling every millisecond; false if `limit` passes first.
template <class F>
bool eventually(F&& f, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!f()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace sg::testing
