// Sets a flag when destroyed: put in a coroutine's frame, it tells a test that the frame
// was destroyed (a cancelled or dropped task).
#pragma once

#include <atomic>

namespace sg::testing {

struct DropFlag {
  std::atomic<bool>* flag;
  ~DropFlag() { flag->store(true); }
};

}  // namespace sg::testing
