// Adaptive load shedding, CoDel-style (Nichols & Jacobson, "Controlling Queue Delay").
//
// Two delay signals feed it:
//   * admission-queue sojourn: how long an admitted request waited for its permits
//     (0 for one that got them at once);
//   * executor scheduling delay: how long a probe task waited in a run queue before it ran
//     (the gateway samples it every few milliseconds).
// Each signal has its own detector, because a low sample of one says nothing about the
// other. A detector enters the shedding state when every sample it saw for `interval`
// stayed at or above `target` (a standing queue, not a burst: a burst drains within an
// interval and some sample falls below target). It leaves that state at a sample below
// target once no request was refused for an interval: while shedding, the queue is empty
// and requests that find a free permit report a zero wait even though demand still exceeds
// the limit; refusals are the evidence that it does.
//
// What shedding does (session.cpp): while either detector sheds, a request that cannot
// get its permits at once is refused with 503 (reason "shed") instead of queueing, so
// admitted requests never wait behind a standing queue. Requests that find a free permit
// are still served: shedding can never refuse work the limits have room for, so it cannot
// starve the gateway (refusing everything on high scheduling delay would, when the 503s
// themselves keep the CPU busy). It therefore acts through the concurrency limits: with
// all limits off (0) there is no queue and nothing to shed.
//
// Thread safety: samples arrive from every worker. The state is two relaxed atomics per
// detector; races between concurrent samples only move the decision by one sample, which
// CoDel tolerates by design (it is a heuristic over an interval, not an exact predicate).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace sg::proxy {

class DelayDetector {
 public:
  using Clock = std::chrono::steady_clock;

  // target 0 = disabled (never sheds).
  void configure(Clock::duration target, Clock::duration interval) {
    target_ns_.store(ns(target), std::memory_order_relaxed);
    interval_ns_.store(ns(interval), std::memory_order_relaxed);
    if (target.count() == 0) reset();
  }

  void observe(Clock::duration delay, Clock::time_point now) {
    const int64_t target = target_ns_.load(std::memory_order_relaxed);
    if (target == 0) return;
    const int64_t t = ns(now.time_since_epoch());
    const int64_t interval = interval_ns_.load(std::memory_order_relaxed);
    if (ns(delay) < target) {
      // Below target: the queue drained at least once; no standing queue.
      if (above_since_ns_.load(std::memory_order_relaxed) != kNone) {
        above_since_ns_.store(kNone, std::memory_order_relaxed);
      }
      if (shedding_.load(std::memory_order_relaxed) &&
          t - last_refusal_ns_.load(std::memory_order_relaxed) >= interval) {
        shedding_.store(false, std::memory_order_relaxed);
      }
      return;
    }
    int64_t since = above_since_ns_.load(std::memory_order_relaxed);
    if (since == kNone) {
      // First sample above target: start the interval (a concurrent first sample may win;
      // either start time is as good).
      above_since_ns_.compare_exchange_strong(since, t, std::memory_order_relaxed);
      return;
    }
    if (t - since >= interval && !shedding_.load(std::memory_order_relaxed)) {
      shedding_.store(true, std::memory_order_relaxed);
      entered_.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // A request was refused because of shedding: demand still exceeds the limits.
  void note_refused(Clock::time_point now) {
    last_refusal_ns_.store(ns(now.time_since_epoch()), std::memory_order_relaxed);
  }

  bool shedding() const { return shedding_.load(std::memory_order_relaxed); }
  // How many times the detector entered the shedding state (for logs and tests).
  uint64_t times_entered() const { return entered_.load(std::memory_order_relaxed); }

  void reset() {
    above_since_ns_.store(kNone, std::memory_order_relaxed);
    shedding_.store(false, std::memory_order_relaxed);
  }

 private:
  static constexpr int64_t kNone = INT64_MIN;
  static int64_t ns(Clock::duration d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); }

  std::atomic<int64_t> target_ns_{0};
  std::atomic<int64_t> interval_ns_{0};
  std::atomic<int64_t> above_since_ns_{kNone};
  std::atomic<int64_t> last_refusal_ns_{0};  // steady-clock ns; 0 = long ago
  std::atomic<bool> shedding_{false};
  std::atomic<uint64_t> entered_{0};
};

struct LoadShedder {
  DelayDetector sojourn;     // admission-queue wait of admitted requests
  DelayDetector scheduling;  // executor run-queue delay, sampled by a probe task

  void configure(std::chrono::steady_clock::duration target, std::chrono::steady_clock::duration interval) {
    sojourn.configure(target, interval);
    scheduling.configure(target, interval);
  }
  bool shedding() const { return sojourn.shedding() || scheduling.shedding(); }
  void note_refused(std::chrono::steady_clock::time_point now) {
    sojourn.note_refused(now);
    scheduling.note_refused(now);
  }
};

}  // namespace sg::proxy
