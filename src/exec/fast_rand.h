// FastRand: xorshift32, a cheap per-owner (never shared) RNG. Workers pick steal victims
// with it (Tokio uses the same); the proxy spreads queue timeouts with it. Not for
// anything that needs unpredictability.
#pragma once

#include <cstdint>

namespace sg::exec {

class FastRand {
 public:
  explicit FastRand(uint32_t seed) : s_(seed | 1) {}
  uint32_t next() {
    s_ ^= s_ << 13;
    s_ ^= s_ >> 17;
    s_ ^= s_ << 5;
    return s_;
  }
  // Uniform in [0, n) (Lemire's multiply-shift; n = 0 gives 0).
  uint32_t below(uint32_t n) { return static_cast<uint32_t>((uint64_t{next()} * n) >> 32); }

 private:
  uint32_t s_;
};

}  // namespace sg::exec
