// Busy-waits on the calling thread: a poll that holds its worker for a known time.
#pragma once

#include <chrono>

namespace sg::testing {

inline void spin_for(std::chrono::nanoseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

}  // namespace sg::testing
