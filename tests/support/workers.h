// A runtime configuration with `n` workers and every other setting at its default.
#pragma once

#include <cstddef>

#include "exec/config.h"

namespace sg::testing {

inline exec::RuntimeConfig workers(std::size_t n) {
  exec::RuntimeConfig c;
  c.worker_threads = n;
  return c;
}

}  // namespace sg::testing
