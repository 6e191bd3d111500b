// Idle coordination (Tokio's idle.rs): how many workers are unparked and how many are
// searching for work, and which workers sleep.
//
// `state_` packs (num_unparked << 16) | num_searching. Rules:
//   * A worker may start searching only while 2 * searching < workers, so at most half the
//     workers steal at once (no thundering herd on a single busy victim).
//   * New work wakes a sleeper only if nobody is searching: a searcher will find it.
//   * The last searcher to find work wakes another sleeper (run_task), so a burst that
//     needs more workers ramps up one worker at a time.
//   * The last searcher to park re-checks every queue (Worker::transition_to_parked),
//     closing the window in which work arrived while everyone was deciding to sleep.
// Memory order: notify_should_wakeup() is a seq_cst RMW (fetch_add 0), a full fence after
// the caller's queue push; parking workers decrement with seq_cst RMWs and then re-check
// queues. Either the pusher sees the parking worker's decrement (and wakes someone), or
// the worker's re-check sees the push: no lost wake-up (Dekker-style).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

namespace sg::exec {

class Idle {
 public:
  explicit Idle(std::size_t num_workers);

  // Returns a sleeping worker to wake, already counted as unparked and searching, or
  // nothing when a wake-up is not needed.
  std::optional<std::size_t> worker_to_notify();
  // Cheap pre-check for pushes made by a running worker: a relaxed load instead of the
  // fencing RMW. A stale answer can only delay parallelism, never lose work: the pushing
  // worker cannot park while its own queue holds the task.
  bool maybe_needs_wakeup() const {
    uint32_t s = state_.load(std::memory_order_relaxed);
    return (s & kSearchMask) == 0 && (s >> kUnparkShift) < num_workers_;
  }

  // True when the worker may become a searcher (it is then counted).
  bool transition_worker_to_searching();
  // Returns true when the caller was the last searcher.
  bool transition_worker_from_searching();
  // Registers the worker as sleeping. Returns true when it was the last searcher.
  bool transition_worker_to_parked(std::size_t worker, bool is_searching);
  // Removes the worker from the sleepers if it is there (it woke by itself). Returns true
  // when it was found (it then counts as unparked, not searching).
  bool unpark_worker_by_id(std::size_t worker);
  bool is_parked(std::size_t worker);

  uint32_t num_searching() const;
  uint32_t num_unparked() const;

 private:
  static constexpr uint32_t kUnparkShift = 16;
  static constexpr uint32_t kSearchMask = (1u << kUnparkShift) - 1;

  bool notify_should_wakeup();

  std::atomic<uint32_t> state_;
  const uint32_t num_workers_;
  std::mutex mu_;
  std::vector<std::size_t> sleepers_;
};

}  // namespace sg::exec
