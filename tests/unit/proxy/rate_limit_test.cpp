// routes[].rate_limit's meter (proxy/rate_limit.h) on a clock the test sets: the burst
// passes and no more, the allowance comes back at the rate, keys are counted apart
// (client address, IPv6 /64, header with a fallback), memory stays within max_keys, and
// under contention from many threads exactly the allowance passes (run under TSan).
#include "proxy/rate_limit.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace sg::proxy {
namespace {

using namespace std::chrono_literals;
using Clock = RateLimiter::Clock;

config::RateLimitSection settings(uint64_t count, std::chrono::milliseconds per, uint64_t burst,
                                  std::string key = "client_ip", uint64_t max_keys = 100'000) {
  config::RateLimitSection s;
  s.rate = "-";
  s.count = count;
  s.per = per;
  s.burst = burst;
  s.key = std::move(key);
  s.max_keys = max_keys;
  return s;
}

int passes(RateLimiter& rl, std::string_view key, Clock::time_point at, int tries) {
  int n = 0;
  for (int i = 0; i < tries; ++i) n += rl.take(key, at).count() == 0;
  return n;
}

TEST(RateLimiter, TheBurstPassesAtOnceThenTheRateRefillsIt) {
  RateLimiter rl(settings(10, 1000ms, 2));  // one every 100 ms, 2 beyond it at once
  const Clock::time_point t0 = Clock::now();
  EXPECT_EQ(passes(rl, "a", t0, 10), 3);
  EXPECT_EQ(rl.take("a", t0), std::chrono::nanoseconds(100ms)) << "refused: 100 ms until the next";
  EXPECT_EQ(rl.take("a", t0 + 99ms).count() > 0, true);
  EXPECT_EQ(passes(rl, "a", t0 + 100ms, 5), 1);
  EXPECT_EQ(passes(rl, "a", t0 + 10s, 10), 3) << "a quiet key gets its whole burst back, no more";
  EXPECT_EQ(passes(rl, "b", t0, 10), 3) << "keys are counted apart";
}

TEST(RateLimiter, ALargeBurstAtASlowRateDoesNotOverflow) {
  // 1/h: burst x interval is 1.08e19 ns for 3e6 (it wrapped negative: all refused) and
  // 3.6e21 for 1e9, the largest the config takes.
  for (uint64_t burst : {uint64_t{3'000'000}, uint64_t{1'000'000'000}}) {
    RateLimiter rl(settings(1, 3'600'000ms, burst));
    EXPECT_EQ(passes(rl, "a", Clock::now(), 1000), 1000) << burst;
  }
}

TEST(RateLimiter, ASteadyClientAtTheRateIsNeverRefused) {
  RateLimiter rl(settings(100, 60'000ms, 0));  // 100/m, no burst: one every 600 ms
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(rl.take("k", t0 + i * 600ms).count(), 0) << i;
  EXPECT_GT(rl.take("k", t0 + 999 * 600ms + 1ms).count(), 0);
}

http::RequestHead with_header(std::string name, std::string value) {
  http::RequestHead req;
  req.headers.add(name, value);
  return req;
}

TEST(RateLimiter, KeysByClientAddressRouteOrHeader) {
  const http::RequestHead none;
  RateLimiter by_ip(settings(1, 1000ms, 0));
  EXPECT_EQ(by_ip.key_of(none, "10.0.0.1"), by_ip.key_of(none, "::ffff:10.0.0.1")) << "one client, one key";
  EXPECT_NE(by_ip.key_of(none, "10.0.0.1"), by_ip.key_of(none, "10.0.0.2"));
  EXPECT_EQ(by_ip.key_of(none, "2001:db8:1:2::1"), by_ip.key_of(none, "2001:db8:1:2:ffff::9")) << "a /64 is one key";
  EXPECT_NE(by_ip.key_of(none, "2001:db8:1:2::1"), by_ip.key_of(none, "2001:db8:1:3::1"));
  RateLimiter by_route(settings(1, 1000ms, 0, "route"));
  EXPECT_EQ(by_route.key_of(none, "10.0.0.1"), by_route.key_of(none, "10.0.0.2"));
  RateLimiter by_header(settings(1, 1000ms, 0, "header:X-Api-Key"));
  const http::RequestHead alice = with_header("x-api-key", "alice");
  EXPECT_EQ(by_header.key_of(alice, "10.0.0.1"), by_header.key_of(alice, "10.0.0.2"));
  EXPECT_NE(by_header.key_of(alice, "10.0.0.1"), by_header.key_of(with_header("X-Api-Key", "bob"), "10.0.0.1"));
  EXPECT_EQ(by_header.key_of(none, "10.0.0.1"), by_ip.key_of(none, "10.0.0.1")) << "without it: by client";
  // A header value cannot pose as a client address: the kinds are prefixed apart.
  const std::string ip_key = by_ip.key_of(none, "10.0.0.1");
  EXPECT_NE(by_header.key_of(with_header("X-Api-Key", ip_key), "10.0.0.9"), ip_key);
  const std::string long_value(10'000, 'v');
  EXPECT_LE(by_header.key_of(with_header("X-Api-Key", long_value), "10.0.0.1").size(), RateLimiter::kMostKeyBytes + 1);
}

TEST(RateLimiter, MemoryStaysWithinMaxKeysForgettingWholeAllowancesFirst) {
  RateLimiter rl(settings(1, 1000ms, 0, "client_ip", 64));
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < 1000; ++i) rl.take("k" + std::to_string(i), t0 + i * 10ms);
  EXPECT_LE(rl.keys(), 64u);
  EXPECT_GT(rl.evicted(), 0u) << "keys still in use had to go";
  // Spread out past each key's interval: every key held has its allowance back, so none
  // still in use is forgotten.
  RateLimiter calm(settings(1, 1000ms, 0, "client_ip", 64));
  for (int i = 0; i < 1000; ++i) calm.take("k" + std::to_string(i), t0 + i * 1100ms);
  EXPECT_LE(calm.keys(), 64u);
  EXPECT_EQ(calm.evicted(), 0u);
}

TEST(RateLimiter, ManyThreadsAtOneInstantPassExactlyTheAllowance) {
  // One key for all (`route`) and one per thread-pair, at a clock that does not move:
  // whatever the interleaving, burst + 1 pass for each key.
  RateLimiter rl(settings(1000, 1000ms, 49, "route"));
  const Clock::time_point t0 = Clock::now();
  std::atomic<int> shared{0}, own{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      const std::string mine = "pair" + std::to_string(t / 2);
      for (int i = 0; i < 2000; ++i) {
        shared += rl.take("", t0).count() == 0;
        own += rl.take(mine, t0).count() == 0;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(shared.load(), 50);
  EXPECT_EQ(own.load(), 4 * 50);
}

}  // namespace
}  // namespace sg::proxy
