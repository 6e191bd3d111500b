// routes[].rate_limit: how many requests a key (a client address, the whole route, or a
// header's value) may send over time. GCRA, the generic cell rate algorithm: the meter that
// nginx's limit_req (with `nodelay`) and a token bucket both amount to, kept as one number
// per key. A key's theoretical arrival time (TAT) is when its allowance would be whole
// again; a request at `now` passes when TAT - now <= burst x interval, and moves TAT to
// max(TAT, now) + interval, where interval = 1 / rate. A key whose TAT has passed holds
// nothing a new key would not, so it can be forgotten at any time: memory is bounded by
// max_keys without losing what matters.
//
// Shared by every worker: keys are spread over shards, each a mutex and a hash map (the
// section held is a lookup and an add; a route keyed by `route` has one key, and so one
// shard's lock, for all).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/schema.h"
#include "http/message.h"

namespace sg::proxy {

class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RateLimiter(const config::RateLimitSection& cfg);
  const config::RateLimitSection& settings() const { return cfg_; }

  // The key `req` from `client_ip` counts by (settings().key), as bytes: a client address
  // in binary (IPv6 by its /64: one host has the whole /64 to pick from), or a header's
  // value (at most kMostKeyBytes of it), each with a kind prefix so that the two never meet.
  std::string key_of(const http::RequestHead& req, std::string_view client_ip) const;
  // Counts one request for `key` at `now`: zero when it passes, else how long until it
  // would (it is not counted then).
  std::chrono::nanoseconds take(std::string_view key, Clock::time_point now);

  std::size_t keys() const;  // held now
  // Keys forgotten while their allowance was still in use (max_keys too small for the
  // clients there are: each such client starts afresh).
  uint64_t evicted() const { return evicted_.load(std::memory_order_relaxed); }

  static constexpr std::size_t kMostKeyBytes = 256;

 private:
  struct KeyHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view k) const { return std::hash<std::string_view>{}(k); }
  };
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<std::string, int64_t, KeyHash, std::equal_to<>> tat;  // ns on Clock
  };
  // Makes room for one more key in a full shard (its lock held): drops every key whose
  // allowance is whole again, or else the one closest to it.
  void evict(Shard& s, int64_t now);

  const config::RateLimitSection cfg_;
  const int64_t interval_ns_;   // between requests at the steady rate
  const int64_t tolerance_ns_;  // burst x interval
  enum class KeyKind : uint8_t { kClientIp, kRoute, kHeader } kind_;
  std::string header_;          // kHeader: its name
  std::size_t per_shard_;       // keys a shard holds before it evicts
  std::vector<std::unique_ptr<Shard>> shards_;
  std::atomic<uint64_t> evicted_{0};
};

}  // namespace sg::proxy
