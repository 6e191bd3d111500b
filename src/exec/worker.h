// One worker: an OS thread that owns a core (local queue, LIFO slot, tick, RNG, counters).
// See worker.cpp for the run loop.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <semaphore>

#include "exec/config.h"
#include "exec/fast_rand.h"
#include "exec/local_queue.h"
#include "exec/parker.h"
#include "exec/poll_log.h"
#include "exec/spin_lock.h"
#include "exec/stats.h"
#include "exec/task.h"

namespace sg::exec {

// Task kinds whose polls do not end a worker's quiet period (idle memory reclaim): the
// housekeeping and monitoring that run on an otherwise idle gateway. The admin endpoint is
// one: a load balancer's /ready probe every second, or a scrape, would otherwise keep the
// worker serving it from ever giving memory back.
inline constexpr unsigned kBackgroundKinds = (1u << static_cast<unsigned>(TaskKind::kHealthCheck)) |
                                             (1u << static_cast<unsigned>(TaskKind::kAdmin)) |
                                             (1u << static_cast<unsigned>(TaskKind::kProbe)) |
                                             (1u << static_cast<unsigned>(TaskKind::kMaintenance));

class Scheduler;

class Worker {
 public:
  Worker(Scheduler* scheduler, std::size_t index);
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void start();
  // Shutdown comes in two steps, so that a worker's own driver is shut down by the worker's
  // thread (an io_uring ring takes submissions only from the thread that drives it):
  // wait_stopped() returns once the thread has left its run loop and dropped its pinned
  // tasks (it then waits, touching nothing), finish() lets it shut its own driver down and
  // exit, and join() waits for that.
  void wait_stopped();
  void finish();
  void join();

  // Queues a task from this worker's own thread (spawn, wake, yield, driver completion).
  void schedule_local(TaskHeader* t, ScheduleKind kind);
  // Queues a task pinned to this worker, from any thread (see "Pinned tasks" in worker.cpp).
  void schedule_pinned(TaskHeader* t);

  Parker& parker() { return parker_; }
  const Stealer<TaskHeader>& stealer() const { return stealer_; }
  const Stealer<TaskHeader>& priority_stealer() const { return priority_stealer_; }
  const PublishedWorkerStats& published() const { return published_; }
  const SlowPollLog& slow_polls() const { return slow_polls_; }
  std::size_t index() const { return index_; }
  // The kernel's id of the worker's thread (gettid), for its /proc/self/task entry; 0
  // before the thread started.
  int os_thread_id() const { return os_thread_id_.load(std::memory_order_relaxed); }

  // After wait_stopped(): hands every queued task (LIFO slot first) to `drop`.
  template <class Drop>
  void drain(Drop&& drop) {
    if (TaskHeader* t = lifo_) {
      lifo_ = nullptr;
      drop(t);
    }
    while (TaskHeader* t = priority_queue_.pop()) drop(t);
    while (TaskHeader* t = run_queue_.pop()) drop(t);
    take_pinned_inbox();
    while (TaskHeader* t = pinned_.pop()) drop(t);
  }

 private:
  static void* thread_main(void* self);
  void run();

  TaskHeader* next_task();
  // Pops this worker's share of the injection queue: the first task, the rest queued.
  TaskHeader* take_injected_batch();
  TaskHeader* next_local_task();
  TaskHeader* pop_priority();
  TaskHeader* steal_work();
  // Poll `t` and the LIFO chain after it; `start` is a clock reading to use as the first
  // poll's start (0: read it). Return the last reading (0 without poll timing).
  uint64_t run_task(TaskHeader* t, uint64_t start);
  uint64_t run_lifo_chain(uint64_t now);
  uint64_t poll_task(TaskHeader* t, uint64_t start);
  // With poll timing: visits the driver after a poll of driver_visit_after_poll or more;
  // true if it did.
  bool visit_driver_after(uint64_t took);
  void poll_untimed(TaskHeader* t);
  [[gnu::noinline]] void note_slow_poll(TaskKind kind, const TaskDiag* d, uint64_t took, uint64_t end);

  void park();
  bool transition_to_parked();
  bool transition_from_parked();
  void park_blocking();
  // How long a park at `now` may last before the worker reclaims idle memory (nullopt: no
  // reclaim pending), and the reclaim itself once it is due.
  std::optional<std::chrono::milliseconds> reclaim_limit(uint64_t now);
  void reclaim_if_idle();
  // Gives up the CPU once between two batches of our ring's completions (config.h).
  void yield_between_batches();
  // A yield that kept the CPU away this long lost it to a whole time slice.
  static constexpr uint64_t kLongYieldNs = 2'000'000;
  void maintenance_tick();
  uint32_t visit_driver();
  void maintenance();
  bool should_notify_others() const;
  void start_batch();
  void end_batch();
  void tune_global_queue_interval();
  void publish_stats(uint64_t now);
  void push_back(TaskHeader* t);
  uint32_t driver_budget() const;
  [[gnu::noinline]] void schedule_local_slow(TaskHeader* t, ScheduleKind kind);
  bool has_local_work() const {
    return lifo_ != nullptr || priority_queue_.has_tasks() || run_queue_.has_tasks() || !pinned_.empty() ||
           pinned_inbox_nonempty_.load(std::memory_order_acquire);
  }
  TaskHeader* pop_pinned();
  void take_pinned_inbox();
  void drop_pinned();

  // A FIFO of tasks linked through TaskHeader::next.
  struct TaskFifo {
    TaskHeader* head = nullptr;
    TaskHeader* tail = nullptr;
    bool empty() const { return head == nullptr; }
    void push(TaskHeader* t) {
      t->next = nullptr;
      if (tail != nullptr) tail->next = t;
      else head = t;
      tail = t;
    }
    void append(TaskFifo& o) {
      if (o.head == nullptr) return;
      if (tail != nullptr) tail->next = o.head;
      else head = o.head;
      tail = o.tail;
      o.head = o.tail = nullptr;
    }
    TaskHeader* pop() {
      TaskHeader* t = head;
      if (t == nullptr) return nullptr;
      head = t->next;
      if (head == nullptr) tail = nullptr;
      t->next = nullptr;
      return t;
    }
  };

  Scheduler* const scheduler_;
  const std::size_t index_;
  std::atomic<int> os_thread_id_{0};
  const RuntimeConfig& cfg_;

  // --- core: touched only by this worker's thread (and by shutdown after join) ---
  LocalQueue<TaskHeader> run_queue_;
  // Priority lane: wake-ups of tasks marked with set_current_task_priority (admitted
  // requests). Same ring and protocol as run_queue_ (stealable); polled before it, at most
  // kMaxPriorityStreak times in a row while ordinary work waits.
  LocalQueue<TaskHeader> priority_queue_;
  // Pinned tasks queued by this worker (never stolen, see worker.cpp).
  TaskFifo pinned_;
  uint32_t priority_streak_ = 0;
  // False only when the priority ring is known empty: only this worker pushes into it, so
  // the hot path skips the ring's atomics while no admitted work is around.
  bool priority_maybe_ = false;
  TaskHeader* lifo_ = nullptr;
  bool lifo_enabled_;
  bool is_searching_ = false;
  bool is_shutdown_ = false;
  uint32_t tick_ = 0;
  uint32_t driver_visit_tick_ = 0;  // tick_ at the last park or driver poll
  uint32_t global_queue_interval_;
  uint32_t sample_counter_ = 0;
  FastRand rand_;
  WorkerCounters counters_;
  uint64_t busy_since_ns_ = 0;
  // Idle memory reclaim (reclaim.h): polls of background tasks (kBackgroundKinds), the
  // other polls as of the last park and of the last reclaim, and when the quiet began
  // (0: at the next park's clock reading).
  uint64_t background_polls_ = 0;
  uint64_t work_polls_at_park_ = 0;
  uint64_t work_polls_at_reclaim_ = 0;
  uint64_t quiet_since_ns_ = 0;
  uint64_t batch_started_ns_ = 0;
  uint64_t batch_polls_ = 0;
  double poll_time_ewma_ns_ = 0;
  const bool time_polls_;  // RuntimeConfig::poll_timing
  const uint64_t long_poll_ns_;
  const uint64_t visit_after_ns_;  // RuntimeConfig::driver_visit_after_poll (never: UINT64_MAX)
  LongPollLimiter long_poll_limiter_;

  // --- shared with other threads ---
  Stealer<TaskHeader> stealer_;
  Stealer<TaskHeader> priority_stealer_;
  Parker parker_;
  // Pinned tasks queued by other threads: under pinned_inbox_lock_; the flag says it may
  // be non-empty (set under the lock, cleared by this worker under it).
  SpinLock pinned_inbox_lock_;
  TaskFifo pinned_inbox_;
  std::atomic<bool> pinned_inbox_nonempty_{false};
  PublishedWorkerStats published_;
  SlowPollLog slow_polls_;
  pthread_t thread_{};
  bool started_ = false;
  std::binary_semaphore stopped_{0};
  std::binary_semaphore may_finish_{0};
};

uint64_t now_ns();

// How many tasks a worker takes from the injection queue in one turn (one lock): its share
// (`injected` / `workers` + 1), only as many as fill its queue to half its capacity, and no
// more than its free slots plus the one it runs at once. At least one. `queued` is the
// queue's len() and `free_slots` its remaining_slots(): these differ while a stalled thief
// holds claimed slots that len() leaves out.
std::size_t injected_batch_size(std::size_t injected, std::size_t workers, std::size_t queued,
                                std::size_t free_slots);

}  // namespace sg::exec
