#include "exec/timers.h"

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <limits>
#include <mutex>
#include <system_error>

#include "exec/context.h"
#include "exec/driver.h"
#include "exec/scheduler.h"

namespace sg::exec {

namespace {
constexpr uint64_t kNoDeadline = std::numeric_limits<uint64_t>::max();
// Wakers fired under a shard lock are woken in batches of this many after unlocking.
constexpr std::size_t kFireBatch = 64;
}  // namespace

bool TimerEntry::arm(Timers& timers, Clock::time_point at, Waker& w, std::size_t tag) {
  assert(tag <= UINT16_MAX && "TimerEntry::arm: a tag is 16 bits");
  cancel();
  waker_ = std::move(w);
  tag_ = static_cast<uint16_t>(tag);
  if (!timers.arm(*this, timers.deadline_ms(at))) {
    w = std::move(waker_);
    return false;
  }
  return true;
}

void TimerEntry::cancel() {
  if (timers_ == nullptr) return;
  timers_->cancel(*this);
  timers_ = nullptr;
}

Timers::Timers(std::size_t shards, std::size_t groups)
    : origin_(Clock::now()), shards_(std::make_unique<Shard[]>(shards == 0 ? 1 : shards)),
      num_shards_(shards == 0 ? 1 : shards), groups_(std::make_unique<Group[]>(groups <= 1 ? 1 : num_shards_)),
      num_groups_(groups <= 1 ? 1 : num_shards_) {}

uint64_t Timers::now_ms(Clock::time_point t) const {
  if (t <= origin_) return 0;
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(t - origin_).count());
}

uint64_t Timers::deadline_ms(Clock::time_point t) const {
  if (t <= origin_) return 0;
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t - origin_).count();
  return static_cast<uint64_t>((ns + 999'999) / 1'000'000);
}

bool Timers::arm(TimerEntry& e, uint64_t when) {
  const ThreadContext& c = tl_ctx;
  const auto shard = static_cast<uint16_t>(c.scheduler != nullptr ? c.worker_index % num_shards_ : 0);
  Shard& s = shards_[shard];
  e.when = when;
  {
    std::lock_guard lk(s.mu);
    if (s.closed || !s.wheel.insert(&e.node())) return false;
    if (when < s.next_due.load(std::memory_order_relaxed)) s.next_due.store(when, std::memory_order_seq_cst);
  }
  e.timers_ = this;
  e.shard_ = shard;
  // See the header: after the insert, so a holder that published an earlier deadline
  // either scans this entry or is woken here.
  Group& g = groups_[group_of(shard)];
  if (when < g.park_deadline.load(std::memory_order_seq_cst) && g.driver != nullptr) g.driver->unpark();
  return true;
}

void Timers::cancel(TimerEntry& e) {
  Waker drop;
  {
    std::lock_guard lk(shards_[e.shard_].mu);
    shards_[e.shard_].wheel.remove(&e.node());
    drop = std::move(e.waker_);  // empty when the timer fired
  }
  // `drop` releases its task reference here, outside the lock.
}

std::size_t Timers::process(Clock::time_point now, std::size_t max, std::size_t group) {
  const uint64_t ms = now_ms(now);
  std::size_t fired = 0;
  // Plain storage: the wakers' references are released into it under the lock and
  // adopted back to wake after unlocking (constructing 64 Wakers per call cost more than
  // the wheel itself).
  struct Fired {
    CoroTaskBase* task;
    uint64_t gen;
    std::size_t tag;
  };
  Fired batch[kFireBatch];
  const auto [first, last] = shards_of(group);
  for (std::size_t i = first; i < last && fired < max; ++i) {
    Shard& s = shards_[i];
    while (fired < max && s.next_due.load(std::memory_order_relaxed) <= ms) {
      const std::size_t limit = std::min(kFireBatch, max - fired);
      std::size_t n = 0;
      {
        std::lock_guard lk(s.mu);
        n = s.wheel.advance(ms, limit, [&](TimerNode* node) {
          TimerEntry& e = TimerEntry::of(node);
          const uint64_t gen = e.waker_.generation();
          batch[n++] = Fired{e.waker_.release(), gen, e.tag_};
        });
        s.next_due.store(s.wheel.next_expiration().value_or(kNoDeadline), std::memory_order_relaxed);
      }
      tl_ctx.in_timers = true;  // the wakes' source, for task diagnostics
      for (std::size_t k = 0; k < n; ++k) {
        Waker(batch[k].task, batch[k].gen).wake({std::error_code{}, batch[k].tag}, ScheduleKind::kDriver);
      }
      tl_ctx.in_timers = false;
      fired += n;
      if (n < limit) break;
    }
  }
  return fired;
}

std::optional<std::chrono::milliseconds> Timers::begin_park(Clock::time_point now, std::size_t group) {
  // Publish "parked, no timeout" first: an arm from now on unparks us unless our scan
  // below sees it; then narrow the deadline to what the scan found.
  std::atomic<uint64_t>& deadline = groups_[group].park_deadline;
  deadline.store(kNoDeadline, std::memory_order_seq_cst);
  uint64_t next = kNoDeadline;
  const auto [first, last] = shards_of(group);
  for (std::size_t i = first; i < last; ++i) next = std::min(next, shards_[i].next_due.load(std::memory_order_seq_cst));
  if (next == kNoDeadline) return std::nullopt;
  deadline.store(next, std::memory_order_seq_cst);
  const uint64_t at = now_ms(now);
  return std::chrono::milliseconds(next > at ? next - at : 0);
}

std::size_t Timers::pending() const {
  std::size_t n = 0;
  for (std::size_t i = 0; i < num_shards_; ++i) {
    std::lock_guard lk(shards_[i].mu);
    n += shards_[i].wheel.size();
  }
  return n;
}

void Timers::shutdown() {
  // Every pending wait completes as aborted; the entries stay linked nowhere.
  for (std::size_t i = 0; i < num_shards_; ++i) {
    Shard& s = shards_[i];
    for (;;) {
      Waker w;
      {
        std::lock_guard lk(s.mu);
        s.closed = true;
        TimerNode* n = s.wheel.first();
        if (n == nullptr) break;
        s.wheel.remove(n);
        w = std::move(TimerEntry::of(n).waker_);
      }
      std::move(w).wake({std::make_error_code(std::errc::operation_canceled)}, ScheduleKind::kDriver);
    }
  }
}

Timers* current_timers() noexcept {
  Scheduler* s = tl_ctx.scheduler;
  return s != nullptr ? &s->timers() : nullptr;
}

}  // namespace sg::exec
