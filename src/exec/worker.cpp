// The worker run loop (Tokio's worker.rs, adapted).
//
// Each iteration ("tick"):
//   1. Every event_interval ticks: poll the I/O driver without blocking (if no other
//      worker holds it), publish stats, notice shutdown.
//   2. next_task(): every global_queue_interval ticks this worker's share of the injection
//      queue first (fairness: remote work, and a local queue's overflow, cannot starve
//      behind local ping-pong); otherwise the priority lane (at most kMaxPriorityStreak in
//      a row while other work waits), LIFO slot, local queue, then that share of the
//      injection queue (enough to fill the local queue to half, at least one task).
//   3. The driver (exec::Driver::visited_when_idle: both of src/io's) flushes what it
//      queued (io_uring's submissions); if it may hold completions (a ring knows, the
//      epoll reactor cannot tell), the worker yields its CPU once (see
//      yield_between_batches in exec/config.h), then polls them and starts over (while
//      such a poll dispatches something), without stealing or the idle protocol.
//   4. steal_work(): become a searcher (at most half the workers at once), steal half of a
//      random victim's priority lane, else of its queue; finally look at the injection
//      queue once more.
//   5. park(): register as sleeping (the last searcher re-checks every queue), then sleep
//      on the condvar, or in the I/O driver if no other worker is driving it.
// run_task() polls a task, then up to max_lifo_polls_per_tick tasks from the LIFO slot
// (the task the previous one woke: request/response locality); past the cap the slot is
// disabled for the tick so two tasks waking each other cannot starve the queue.
//
// Pinned tasks (spawn_local, Tokio's LocalSet): a task pinned to this worker is queued only
// in its pinned FIFO, never in the LIFO slot, the run queues or the injection queue, so no
// other worker ever polls it and it may hold state that is not thread-safe. This worker's
// own wake-ups push to the FIFO directly; other threads push to a locked inbox and unpark
// this worker (its parker, not the idle protocol: like an I/O completion, the work is for
// this worker only). next_task() takes pinned tasks after the local queue (before the
// injection queue, stealing or parking) and first once per global_queue_interval (half an
// interval after the injection queue's turn), so a busy local queue cannot starve them.
// When the worker stops, it drops its queued pinned tasks itself, in queue order; pinned
// tasks woken after that (by the runtime's shutdown) are dropped by the scheduler's
// drains, after this thread has stopped.
#include "exec/worker.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "exec/context.h"
#include "exec/reclaim.h"
#include "exec/runtime.h"
#include "exec/scheduler.h"

namespace sg::exec {

std::size_t injected_batch_size(std::size_t injected, std::size_t workers, std::size_t queued,
                                std::size_t free_slots) {
  // The first task taken is returned, not queued, so the rest must also fit the free
  // slots: len() leaves out the slots a thief has claimed and not yet copied (a stalled
  // steal), which stay occupied until it finishes (a TSan stress run hit the assertion).
  constexpr std::size_t kHalf = LocalQueue<TaskHeader>::kCapacity / 2;
  const std::size_t to_half = queued < kHalf ? kHalf - queued : 0;
  return std::max<std::size_t>(std::min({injected / workers + 1, to_half, free_slots + 1}), 1);
}

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

namespace {
// One in kDelaySampleEvery queued schedules (not LIFO-slot ones) is timestamped for the
// scheduling-delay histogram: two clock reads per sampled task instead of per task.
constexpr uint32_t kDelaySampleEvery = 16;
// Priority-lane polls in a row before one ordinary task gets its turn: admitted work goes
// first, but a stream of it cannot starve everything else.
constexpr uint32_t kMaxPriorityStreak = 32;
// Completions a driver poll may always dispatch, even onto a full queue (see driver_budget).
constexpr uint32_t kMinDriverBatch = 16;
constexpr double kPollTimeEwmaAlpha = 0.1;
}  // namespace

Worker::Worker(Scheduler* scheduler, std::size_t index)
    : scheduler_(scheduler),
      index_(index),
      cfg_(scheduler->config()),
      lifo_enabled_(cfg_.lifo_slot),
      global_queue_interval_(cfg_.global_queue_interval),
      rand_(static_cast<uint32_t>(0x9E3779B9u * (index + 1))),
      time_polls_(cfg_.poll_timing),
      long_poll_ns_(static_cast<uint64_t>(cfg_.long_poll_threshold.count())),
      visit_after_ns_(cfg_.driver_visit_after_poll.count() > 0
                          ? static_cast<uint64_t>(cfg_.driver_visit_after_poll.count())
                          : UINT64_MAX),
      stealer_(run_queue_.stealer()),
      priority_stealer_(priority_queue_.stealer()),
      parker_(&scheduler->driver_slot(index)) {
  poll_time_ewma_ns_ =
      static_cast<double>(kTargetGlobalQueueIntervalTime.count()) / cfg_.global_queue_interval;
}

void Worker::start() {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, cfg_.thread_stack_size);
  int rc = pthread_create(&thread_, &attr, &Worker::thread_main, this);
  pthread_attr_destroy(&attr);
  if (rc != 0) throw std::runtime_error("failed to start worker thread");
  started_ = true;
  std::string name = cfg_.thread_name + "-" + std::to_string(index_);
  name.resize(std::min<std::size_t>(name.size(), 15));  // kernel limit
  pthread_setname_np(thread_, name.c_str());
}

void Worker::wait_stopped() {
  if (started_) stopped_.acquire();
}

void Worker::finish() {
  if (started_) may_finish_.release();
}

void Worker::join() {
  if (started_) {
    pthread_join(thread_, nullptr);
    started_ = false;
  }
}

void* Worker::thread_main(void* self) {
  static_cast<Worker*>(self)->run();
  return nullptr;
}

void Worker::run() {
  enable_task_cache();  // before anything else allocates on this thread
  os_thread_id_.store(static_cast<int>(::gettid()), std::memory_order_relaxed);
  ThreadContext& c = tl_ctx;
  c.scheduler = scheduler_;
  c.worker = this;
  c.worker_index = index_;
  c.live_slot = scheduler_->live_slot(index_);
  c.counters = &counters_;
  uint64_t now = now_ns();
  busy_since_ns_ = now;
  start_batch();
  parker_.attach();

  // With poll timing: the last poll's end reading, while the next task follows at once (a
  // queue pop later), so that back-to-back polls read the clock once each, not twice.
  uint64_t clock = 0;
  while (!is_shutdown_) {
    ++tick_;
    if (tick_ % cfg_.event_interval == 0) {
      maintenance_tick();
      clock = 0;  // (it may have reaped the driver: time has passed)
    }
    if (TaskHeader* t = next_task()) {
      clock = run_task(t, clock);
      continue;
    }
    clock = 0;
    end_batch();
    // The batch's submissions go to the kernel before we look elsewhere. Completions that
    // are already on our own ring (or in the reactor) are our work: we take them before
    // looking at the other workers' queues, and without the idle protocol (searching,
    // parked, unparked: shared state and a mutex) that a park which returns at once would
    // go through.
    // Only while such a visit dispatches something: a ring can say it is ready and then
    // yield nothing (io_uring's task-work flag, left set: io/uring.cpp, flush), and a
    // worker that kept visiting it spun a CPU while the gateway was idle. A visit that
    // finds nothing goes on to stealing and the park, whose wait sleeps.
    if (parker_.flush()) {
      yield_between_batches();
      start_batch();
      if (visit_driver() != 0) continue;
    }
    if (TaskHeader* t = steal_work()) {
      start_batch();
      clock = run_task(t, 0);
      continue;
    }
    park();
    start_batch();
  }
  drop_pinned();
  stopped_.release();
  may_finish_.acquire();  // (the scheduler drains the queues and stops the timers meanwhile)
  parker_.detach();
  publish_stats(now_ns());
  c = ThreadContext{};
  disable_task_cache();
  parker_.shutdown_own_driver();
}

// --- scheduling -------------------------------------------------------------------------

void worker_schedule_local(Worker* w, TaskHeader* t, ScheduleKind kind) noexcept { w->schedule_local(t, kind); }

void Worker::push_back(TaskHeader* t) {
  run_queue_.push_back_or_overflow(t, scheduler_->inject(), &counters_);
}

void Worker::schedule_local(TaskHeader* t, ScheduleKind kind) {
  ++counters_.local_schedules;
  // The common case of task-to-task wake-ups (the LIFO slot is empty: the previous
  // occupant was just polled) takes no registers to save: everything else is out of line.
  // It is not sampled for the scheduling-delay histogram: a LIFO task runs as soon as its
  // waker's poll returns, so the histogram measures waits in queues.
  if (kind == ScheduleKind::kWake && lifo_ == nullptr && lifo_enabled_ && !tl_ctx.in_driver &&
      (t->state.load(std::memory_order_relaxed) & task_state::kPriority) == 0) {
    lifo_ = t;
    return;
  }
  schedule_local_slow(t, kind);
}

void Worker::schedule_local_slow(TaskHeader* t, ScheduleKind kind) {
  if (++sample_counter_ % kDelaySampleEvery == 0) t->ready_ns = now_ns();
  const bool in_driver = tl_ctx.in_driver;
  if (kind != ScheduleKind::kYield && (t->state.load(std::memory_order_relaxed) & task_state::kPriority)) {
    // A wake-up of admitted work (a yield is not: a hogging task waits like any other).
    ++counters_.priority_schedules;
    priority_queue_.push_back_or_overflow(t, scheduler_->inject(), &counters_);
    priority_maybe_ = true;
  } else if (kind == ScheduleKind::kWake && lifo_enabled_ && !in_driver) {
    // The LIFO slot: the woken task runs next. Its previous occupant goes to the queue.
    TaskHeader* prev = lifo_;
    lifo_ = t;
    if (prev == nullptr) return;  // nothing stealable was added: no need to wake anyone
    push_back(prev);
  } else {
    push_back(t);
  }
  // Others may steal what we just queued. Not for a yield or a requeue (no runnable work
  // was added: the task was running here), nor while dispatching driver completions (we
  // are about to run them; park() notifies afterwards if there is surplus).
  if (kind != ScheduleKind::kYield && kind != ScheduleKind::kRequeue && !in_driver &&
      scheduler_->idle().maybe_needs_wakeup()) {
    scheduler_->notify_parked();
  }
}

void Worker::schedule_pinned(TaskHeader* t) {
  if (tl_ctx.worker == this) {
    pinned_.push(t);
    return;
  }
  {
    std::lock_guard lk(pinned_inbox_lock_);
    pinned_inbox_.push(t);
    // Release (and the lock): the worker that sees the flag sees the task's link.
    pinned_inbox_nonempty_.store(true, std::memory_order_release);
  }
  // seq_cst in the parker: either this worker's next park sees the notification, or its
  // has_local_work() check before parking sees the flag.
  parker_.unpark();
}

void Worker::take_pinned_inbox() {
  if (!pinned_inbox_nonempty_.load(std::memory_order_acquire)) return;
  std::lock_guard lk(pinned_inbox_lock_);
  pinned_.append(pinned_inbox_);
  pinned_inbox_nonempty_.store(false, std::memory_order_relaxed);
}

TaskHeader* Worker::pop_pinned() {
  if (pinned_.empty()) take_pinned_inbox();
  return pinned_.pop();
}

void Worker::drop_pinned() {
  take_pinned_inbox();
  while (TaskHeader* t = pinned_.pop()) t->vtable->shutdown(t);
}

TaskHeader* Worker::next_local_task() {
  if (TaskHeader* t = lifo_) {
    lifo_ = nullptr;
    return t;
  }
  return run_queue_.pop();
}

TaskHeader* Worker::pop_priority() {
  if (!priority_maybe_) return nullptr;
  if (TaskHeader* t = priority_queue_.pop()) return t;
  priority_maybe_ = false;  // drained by thieves or overflow; only we refill it
  return nullptr;
}

TaskHeader* Worker::next_task() {
  if (tick_ % global_queue_interval_ == 0) {
    tune_global_queue_interval();
    // Our share (up to half a queue), not one task: a local queue that overflowed sent the
    // oldest half of its tasks (128) here, and at one per interval the last of them waited
    // 128 intervals (about 130 ms at 1,000 busy connections, the p99 of that scenario).
    if (TaskHeader* t = take_injected_batch()) return t;
    return next_local_task();
  }
  // The pinned FIFO's own fairness turn, half an interval after the injection queue's.
  if (tick_ % global_queue_interval_ == global_queue_interval_ / 2) {
    if (TaskHeader* t = pop_pinned()) return t;
  }
  if (priority_maybe_ &&
      (priority_streak_ < kMaxPriorityStreak || (lifo_ == nullptr && !run_queue_.has_tasks()))) {
    if (TaskHeader* t = pop_priority()) {
      ++priority_streak_;
      return t;
    }
  }
  priority_streak_ = 0;
  if (TaskHeader* t = next_local_task()) return t;
  if (TaskHeader* t = pop_priority()) return t;  // streak cap hit, nothing else local
  if (TaskHeader* t = pop_pinned()) return t;
  return take_injected_batch();
}

TaskHeader* Worker::take_injected_batch() {
  InjectQueue& inject = scheduler_->inject();
  if (inject.is_empty()) return nullptr;
  // Our share of the injection queue in one lock acquisition, leaving the rest for other
  // workers, and only as much as fills our queue to half its capacity (at least one task).
  // Not to the brim: a queue filled at the periodic turn overflows at its next push and
  // sends half of itself back. 1,000 yielding tasks on 2 workers did that at every turn,
  // 255 tasks through the injection queue's lock per 61 polls: yield_many fell from 30 to
  // 16 M polls/s. Above half, one task per turn (Tokio's rule) still bounds the wait.
  const std::size_t n = injected_batch_size(inject.len(), scheduler_->num_workers(), run_queue_.len(),
                                            run_queue_.remaining_slots());
  TaskHeader* batch[LocalQueue<TaskHeader>::kCapacity / 2];
  std::size_t got = inject.pop_n(batch, n);
  if (got == 0) return nullptr;
  counters_.remote_polled += got;
  if (got > 1) run_queue_.push_back_batch(batch + 1, static_cast<uint32_t>(got - 1));
  return batch[0];
}

TaskHeader* Worker::steal_work() {
  Idle& idle = scheduler_->idle();
  if (cfg_.work_stealing) {
    if (!is_searching_) is_searching_ = idle.transition_worker_to_searching();
    if (!is_searching_) return nullptr;
    const std::size_t n = scheduler_->num_workers();
    const std::size_t start = rand_.below(static_cast<uint32_t>(n));
    for (std::size_t i = 0; i < n; ++i) {
      std::size_t victim = (start + i) % n;
      if (victim == index_) continue;
      Worker& v = scheduler_->worker(victim);
      if (TaskHeader* t = v.priority_stealer().steal_into(priority_queue_, &counters_)) {
        priority_maybe_ = true;  // the rest of the stolen half landed in our lane
        return t;
      }
      if (TaskHeader* t = v.stealer().steal_into(run_queue_, &counters_)) return t;
    }
  }
  // Nothing to steal: one last look at the injection queue.
  if (TaskHeader* t = scheduler_->inject().pop()) {
    ++counters_.remote_polled;
    return t;
  }
  return nullptr;
}

namespace {

void note_poll_start(TaskDiag* d, uint64_t start) {
  constexpr auto r = std::memory_order_relaxed;
  const uint64_t ready = d->ready_at_ns.exchange(0, r);
  if (ready != 0 && start > ready) d->scheduled_ns.fetch_add(start - ready, r);
}

void note_poll_end(TaskDiag* d, uint64_t took, std::size_t worker) {
  constexpr auto r = std::memory_order_relaxed;
  d->polls.fetch_add(1, r);
  d->busy_ns.fetch_add(took, r);
  if (took > d->max_poll_ns.load(r)) d->max_poll_ns.store(took, r);  // a racing poll may win: it is a maximum too
  d->last_worker.store(static_cast<uint32_t>(worker), r);
}

}  // namespace

// With poll timing, polls `t` from `start` (a clock reading just taken) and returns the
// reading at its end: the poll-time histogram, long polls and the slowest-polls log, and a
// chain of polls reads the clock once per poll; the start reading is also the poll's
// tick_now. Without it, `start` is 0 and so is the result.
uint64_t Worker::poll_task(TaskHeader* t, uint64_t start) {
  if (t->ready_ns != 0) {
    const uint64_t now = start != 0 ? start : now_ns();
    counters_.sched_delay.record(now > t->ready_ns ? now - t->ready_ns : 0);
    t->ready_ns = 0;
  }
  ++counters_.polls;
  ++batch_polls_;
  if (!time_polls_) {
    poll_untimed(t);
    return 0;
  }
  const TaskKind kind = t->kind;
  // Told apart only here, with poll timing (the gateway's setting), so that the untimed
  // hot path pays nothing for it: without, every poll counts as work.
  background_polls_ += (kBackgroundKinds >> static_cast<unsigned>(kind)) & 1u;
  TaskDiag* const d = t->diag;
  if (d != nullptr) {
    // Our own reference keeps the task, and so its record, alive through the bookkeeping
    // after the poll (which may complete and free it, or hand it to another worker).
    task_ref_inc(t);
    note_poll_start(d, start);
  }
  ThreadContext& c = tl_ctx;
  c.budget = cfg_.coop_budget;
  c.budget_active = true;
  c.tick_now = Clock::time_point(std::chrono::nanoseconds(start));
  c.tick_now_valid = true;
  t->vtable->poll(t);
  c.budget_active = false;
  const uint64_t end = now_ns();
  const uint64_t took = end - start;
  counters_.poll_time.record(took);
  if (d != nullptr) note_poll_end(d, took, index_);
  if (took > slow_polls_.floor() || took >= long_poll_ns_ || slow_polls_.window_over(end)) {
    note_slow_poll(kind, d, took, end);
  }
  if (d != nullptr) task_ref_dec(t);
  // After a driver visit the next poll starts from a fresh reading: timed from `end`, it
  // would count the visit (sends it submitted ran in the kernel) as its own, and pass the
  // threshold in turn.
  return visit_driver_after(took) ? now_ns() : end;
}

bool Worker::visit_driver_after(uint64_t took) {
  // The driver is visited every event_interval ticks, when the queue runs dry, and at a
  // park: in ticks, not time. Behind long polls that was long: a TLS handshake computes
  // for ~300 us, so 61 of them kept this ring's completions (a new connection, a client's
  // next flight) and its queued submissions (the flight another poll had queued) for
  // ~18 ms, while that client, and with few clients the other worker and the machine,
  // sat idle. So a poll of driver_visit_after_poll (100 us) or more makes a visit due at
  // once. (Not the sum of short polls: counted in wall time, which includes the thread's
  // preemptions, that made 0.15 more io_uring_enter per GET at 1,000 connections, where
  // 50 polls of 2 us fill a batch.)
  if (took < visit_after_ns_) return false;
  ++counters_.overdue_driver_polls;
  visit_driver();
  return true;
}

void Worker::poll_untimed(TaskHeader* t) {
  ThreadContext& c = tl_ctx;
  c.budget = cfg_.coop_budget;
  c.budget_active = true;
  c.tick_now_valid = false;  // read lazily, once, if the poll needs the time
  t->vtable->poll(t);
  c.budget_active = false;
}

void Worker::note_slow_poll(TaskKind kind, const TaskDiag* d, uint64_t took, uint64_t end) {
  SlowPoll p;
  p.duration_ns = took;
  p.ended_ns = end;
  p.worker = static_cast<uint32_t>(index_);
  p.kind = kind;
  if (d != nullptr) {
    p.task_id = d->id;
    p.name = scheduler_->tasks().name_of(d);
  }
  if (took >= long_poll_ns_) {
    ++counters_.long_polls;
    uint64_t held = 0;
    if (cfg_.on_long_poll != nullptr && long_poll_limiter_.admit(end, held)) cfg_.on_long_poll(LongPoll{p, held});
  }
  slow_polls_.record(std::move(p));
}

uint64_t Worker::run_task(TaskHeader* t, uint64_t start) {
  // Leaving the searching state lets another idle worker search; if we were the last
  // searcher, wake one so a burst of work ramps up more workers.
  if (is_searching_) {
    is_searching_ = false;
    if (scheduler_->idle().transition_worker_from_searching()) scheduler_->notify_parked();
  }
  return run_lifo_chain(poll_task(t, time_polls_ ? (start != 0 ? start : now_ns()) : 0));
}

uint64_t Worker::run_lifo_chain(uint64_t now) {
  uint32_t lifo_polls = 0;
  for (;;) {
    TaskHeader* next = lifo_;
    if (next == nullptr) {
      lifo_enabled_ = cfg_.lifo_slot;
      return now;
    }
    lifo_ = nullptr;
    if (tl_ctx.budget == 0) {
      // The previous task spent its whole budget: it hogs the worker, so what it woke
      // waits its turn at the back instead of running right after it.
      push_back(next);
      return now;
    }
    ++lifo_polls;
    ++counters_.lifo_hits;
    if (lifo_polls >= cfg_.max_lifo_polls_per_tick) {
      if (run_queue_.has_tasks()) {
        // Tasks are waiting behind the chain: further wakes this tick go to the back.
        lifo_enabled_ = false;
        ++counters_.lifo_capped;
      } else {
        // Nobody waits locally; keep the slot (a spawn chain stays cache-hot) but end the
        // tick so the injection queue and the I/O driver still get their turn.
        return poll_task(next, now);
      }
    }
    now = poll_task(next, now);
  }
}

// --- parking ----------------------------------------------------------------------------

bool Worker::should_notify_others() const {
  // A searcher will find surplus work itself; otherwise share when we hold more than one.
  if (is_searching_) return false;
  return (lifo_ != nullptr ? 1u : 0u) + priority_queue_.len() + run_queue_.len() > 1;
}

bool Worker::transition_to_parked() {
  if (has_local_work()) return false;
  bool last_searcher = scheduler_->idle().transition_worker_to_parked(index_, is_searching_);
  is_searching_ = false;
  if (last_searcher) scheduler_->notify_if_work_pending();
  return true;
}

bool Worker::transition_from_parked() {
  Idle& idle = scheduler_->idle();
  if (has_local_work()) {
    // Woken by our own I/O completions: searching only if someone else also woke us.
    is_searching_ = !idle.unpark_worker_by_id(index_);
    return true;
  }
  if (idle.is_parked(index_)) return false;  // spurious: nobody took us off the list
  is_searching_ = true;  // notify_parked counted us as searching
  return true;
}

void Worker::park() {
  if (!transition_to_parked()) return;
  // The quiet period starts at the first park after work (stamped with park_blocking's
  // clock reading: no reading of its own); background polls (a pool reaper every second,
  // the scheduling-delay probe, health checks) do not end it.
  const uint64_t work = counters_.polls - background_polls_;
  if (work != work_polls_at_park_) {
    work_polls_at_park_ = work;
    quiet_since_ns_ = 0;
  }
  while (!is_shutdown_) {
    park_blocking();  // publishes the counters before it sleeps; the next park or tick, after
    is_shutdown_ = scheduler_->inject().is_closed();
    if (transition_from_parked()) break;
    reclaim_if_idle();
  }
}

std::optional<std::chrono::milliseconds> Worker::reclaim_limit(uint64_t now) {
  // Only after work: a quiet worker reclaims once, then sleeps without a limit.
  if (cfg_.idle_memory_reclaim.count() == 0 || work_polls_at_park_ == work_polls_at_reclaim_) return std::nullopt;
  if (quiet_since_ns_ == 0) {  // the first park after work (the common case under load)
    quiet_since_ns_ = now;
    return cfg_.idle_memory_reclaim;
  }
  const uint64_t due_ns =
      quiet_since_ns_ + static_cast<uint64_t>(std::chrono::nanoseconds(cfg_.idle_memory_reclaim).count());
  if (now >= due_ns) return std::chrono::milliseconds{0};
  return std::chrono::milliseconds{(due_ns - now + 999'999) / 1'000'000};
}

void Worker::reclaim_if_idle() {
  const uint64_t woke_ns = busy_since_ns_;  // park_blocking's reading after waking
  std::optional<std::chrono::milliseconds> left = reclaim_limit(woke_ns);
  if (!left || left->count() > 0) return;
  counters_.memory_reclaimed_bytes += reclaim_thread_memory();
  ++counters_.memory_reclaims;
  // The pages go back from the blocking pool: malloc_trim takes milliseconds on a large
  // heap, during which this worker's queue and ring would wait.
  Handle::current().spawn_blocking([] { release_free_pages(); }, "release free pages").detach();
  work_polls_at_reclaim_ = work_polls_at_park_;
  publish_stats(woke_ns);
}

void Worker::park_blocking() {
  uint64_t now = now_ns();
  counters_.busy_ns += now - busy_since_ns_;
  ++counters_.parks;
  publish_stats(now);
  busy_since_ns_ = now;  // reset below after waking
  if (parker_.park(driver_budget(), reclaim_limit(now))) ++counters_.driver_polls;
  driver_visit_tick_ = tick_;
  ++counters_.unparks;
  busy_since_ns_ = now_ns();
  if (should_notify_others()) scheduler_->notify_parked();
}

void Worker::yield_between_batches() {
  // Why, and its price: RuntimeConfig::yield_between_batches. Here: after the flush, so
  // the batch's sends leave before anyone else runs, and before taking the next
  // completions. A yield longer than kLongYieldNs is counted, not acted on: pausing the
  // yields after one made the workers each other's CPU hogs again (the sibling of a
  // worker that stopped yielding then saw long yields too).
  if (!cfg_.yield_between_batches) return;
  ++counters_.batch_yields;
  const uint64_t before = now_ns();
  ::sched_yield();
  if (now_ns() - before >= kLongYieldNs) ++counters_.long_batch_yields;
}

void Worker::maintenance_tick() {
  end_batch();  // (and starts the next)
  visit_driver();
  maintenance();
}

uint32_t Worker::visit_driver() {
  // Submits what is queued, and dispatches completions onto our queue; what we cannot
  // run soon, another worker may steal.
  const std::optional<uint32_t> events = parker_.poll_driver(driver_budget());
  if (events) ++counters_.driver_polls;
  driver_visit_tick_ = tick_;
  if (should_notify_others()) scheduler_->notify_parked();
  return events.value_or(0);
}

uint32_t Worker::driver_budget() const {
  // Completions dispatched here are queued on this worker. Taking more than the local
  // queue has room for would overflow the rest into the injection queue, where (checked
  // once per global_queue_interval ticks) they wait behind every later driver poll: with
  // 1,000 busy connections that was a 100-250 ms p99. What we leave stays ready in the
  // reactor, in order, for the next poll (ours or a parked worker's).
  // A queue that stays (nearly) full for a whole event interval, though (yielding tasks),
  // gets kMinDriverBatch anyway, so its worker still sees its timers and sockets (those few
  // overflow). Not one that a park or poll just filled: the interval's polls are not
  // aligned with parks, and a poll one tick after a park that filled the queue would
  // overflow it (seen as a flaky burst test under ASan).
  // A completion may wake a task of either lane, so the fuller one bounds the batch.
  uint32_t room = std::min(run_queue_.remaining_slots(), priority_queue_.remaining_slots());
  if (room < kMinDriverBatch && tick_ - driver_visit_tick_ >= cfg_.event_interval) room = kMinDriverBatch;
  return std::min<uint32_t>(cfg_.max_io_events_per_tick, room);
}

void Worker::maintenance() {
  uint64_t now = now_ns();
  counters_.busy_ns += now - busy_since_ns_;
  busy_since_ns_ = now;
  publish_stats(now);
  if (!is_shutdown_) is_shutdown_ = scheduler_->inject().is_closed();
}

void Worker::publish_stats(uint64_t /*now*/) {
  counters_.local_queue_depth = run_queue_.len() + priority_queue_.len();
  counters_.global_queue_interval = global_queue_interval_;
  published_.publish(counters_);
}

// --- adaptive global queue interval (tokio#5720) ------------------------------------------

// Only the adaptive interval reads the average: without it, batches cost no clock reads
// (two per park and per driver poll) and no pow().
void Worker::start_batch() {
  if (cfg_.adaptive_global_queue_interval) batch_started_ns_ = now_ns();
}

// Folds the batch's polls into the average; the next batch starts at the same reading
// (a park or steal restarts it with start_batch).
void Worker::end_batch() {
  if (batch_polls_ == 0 || !cfg_.adaptive_global_queue_interval) {
    batch_polls_ = 0;
    return;
  }
  const uint64_t now = now_ns();
  double elapsed = static_cast<double>(now - batch_started_ns_);
  batch_started_ns_ = now;
  double polls = static_cast<double>(batch_polls_);
  double mean = elapsed / polls;
  // Weight the update by how many polls the batch held.
  double alpha = 1.0 - std::pow(1.0 - kPollTimeEwmaAlpha, polls);
  poll_time_ewma_ns_ = alpha * mean + (1.0 - alpha) * poll_time_ewma_ns_;
  batch_polls_ = 0;
}

void Worker::tune_global_queue_interval() {
  if (!cfg_.adaptive_global_queue_interval) return;
  double target = static_cast<double>(kTargetGlobalQueueIntervalTime.count());
  double per = poll_time_ewma_ns_ > 1.0 ? target / poll_time_ewma_ns_ : kMaxGlobalQueueInterval;
  uint32_t next = static_cast<uint32_t>(std::clamp(per, double{kMinGlobalQueueInterval},
                                                   double{kMaxGlobalQueueInterval}));
  // Ignore jitter.
  uint32_t cur = global_queue_interval_;
  if ((next > cur ? next - cur : cur - next) > 2) global_queue_interval_ = next;
}

}  // namespace sg::exec
