#include "proxy/rate_limit.h"

#include <algorithm>

#include "routing/address_block.h"

namespace sg::proxy {

namespace {

constexpr std::size_t kMostShards = 32;

// The most burst x interval counts for: 10 years. (1/h with the largest burst the config
// takes would overflow 64 bits of nanoseconds; the allowance is as good as endless then.)
constexpr int64_t kMostTolerance = int64_t{10} * 365 * 24 * 3600 * 1'000'000'000;

int64_t interval_of(const config::RateLimitSection& c) {
  const int64_t per = std::chrono::duration_cast<std::chrono::nanoseconds>(c.per).count();
  return std::max<int64_t>(1, per / static_cast<int64_t>(std::max<uint64_t>(1, c.count)));
}

int64_t tolerance_of(const config::RateLimitSection& c, int64_t interval) {
  if (c.burst >= static_cast<uint64_t>(kMostTolerance / interval)) return kMostTolerance;
  return interval * static_cast<int64_t>(c.burst);
}

}  // namespace

RateLimiter::RateLimiter(const config::RateLimitSection& cfg)
    : cfg_(cfg),
      interval_ns_(interval_of(cfg)),
      tolerance_ns_(tolerance_of(cfg, interval_ns_)) {
  if (cfg.key == "route") {
    kind_ = KeyKind::kRoute;
  } else if (cfg.key.rfind("header:", 0) == 0) {
    kind_ = KeyKind::kHeader;
    header_ = cfg.key.substr(7);
  } else {
    kind_ = KeyKind::kClientIp;
  }
  const std::size_t n = std::clamp<std::size_t>(cfg.max_keys, 1, kMostShards);
  per_shard_ = (cfg.max_keys + n - 1) / n;
  for (std::size_t i = 0; i < n; ++i) shards_.push_back(std::make_unique<Shard>());
}

std::string RateLimiter::key_of(const http::RequestHead& req, std::string_view client_ip) const {
  if (kind_ == KeyKind::kRoute) return {};
  if (kind_ == KeyKind::kHeader) {
    if (const std::string* v = req.headers.get(header_)) {
      return "h" + v->substr(0, kMostKeyBytes);
    }
  }
  const std::optional<routing::IpAddress> a = routing::parse_ip(client_ip);
  if (!a) return "t" + std::string(client_ip.substr(0, kMostKeyBytes));  // not from TCP: by its text
  const char* bytes = reinterpret_cast<const char*>(a->bytes.data());
  return a->is_v4() ? "4" + std::string(bytes + 12, 4) : "6" + std::string(bytes, 8);
}

std::chrono::nanoseconds RateLimiter::take(std::string_view key, Clock::time_point now_tp) {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(now_tp.time_since_epoch()).count();
  Shard& s = *shards_[KeyHash{}(key) % shards_.size()];
  std::lock_guard lk(s.mu);
  auto it = s.tat.find(key);
  const int64_t tat = it == s.tat.end() ? now : std::max(it->second, now);
  if (tat - now > tolerance_ns_) {
    return std::chrono::nanoseconds(tat - now - tolerance_ns_);
  }
  if (it != s.tat.end()) {
    it->second = tat + interval_ns_;
    return {};
  }
  if (s.tat.size() >= per_shard_) evict(s, now);
  s.tat.emplace(std::string(key), tat + interval_ns_);
  return {};
}

void RateLimiter::evict(Shard& s, int64_t now) {
  const std::size_t before = s.tat.size();
  std::erase_if(s.tat, [now](const auto& kv) { return kv.second <= now; });
  if (s.tat.size() < before) return;
  auto closest = std::min_element(s.tat.begin(), s.tat.end(),
                                  [](const auto& a, const auto& b) { return a.second < b.second; });
  if (closest == s.tat.end()) return;
  s.tat.erase(closest);
  evicted_.fetch_add(1, std::memory_order_relaxed);
}

std::size_t RateLimiter::keys() const {
  std::size_t n = 0;
  for (const auto& s : shards_) {
    std::lock_guard lk(s->mu);
    n += s->tat.size();
  }
  return n;
}

}  // namespace sg::proxy
