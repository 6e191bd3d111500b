#include "exec/scheduler.h"

#include <algorithm>
#include <mutex>

#include "exec/context.h"
#include "exec/worker.h"

namespace sg::exec {

namespace {
// Remote schedules are sampled for the delay histogram too (thread-local counter).
thread_local uint32_t tl_remote_sample = 0;
constexpr uint32_t kRemoteSampleEvery = 16;
}  // namespace

void schedule_task_slow(TaskHeader* t, ScheduleKind kind) noexcept { t->scheduler->schedule(t, kind); }
void note_task_created(Scheduler* s) noexcept { s->note_task_created(); }
void note_task_freed(Scheduler* s) noexcept { s->note_task_freed(); }

void Scheduler::note_remote_created() noexcept {
  live_[workers_.size()].n.fetch_add(1, std::memory_order_relaxed);
}
void Scheduler::note_remote_freed() noexcept {
  live_[workers_.size()].n.fetch_sub(1, std::memory_order_relaxed);
}
std::atomic<int64_t>* Scheduler::live_slot(std::size_t worker) noexcept { return &live_[worker].n; }

int64_t Scheduler::live_tasks() const noexcept {
  int64_t sum = 0;
  for (std::size_t i = 0; i <= workers_.size(); ++i) sum += live_[i].n.load(std::memory_order_seq_cst);
  return sum;
}

namespace {
// Zombie schedulers stay reachable (not reported as leaks) for the life of the process.
std::mutex g_zombies_mu;
std::vector<std::unique_ptr<Scheduler>>* g_zombies = nullptr;
}  // namespace

void Scheduler::release(std::unique_ptr<Scheduler> s) {
  if (!s) return;
  s->shutdown();
  if (s->live_tasks() == 0) return;  // unique_ptr frees it
  std::lock_guard lk(g_zombies_mu);
  if (g_zombies == nullptr) g_zombies = new std::vector<std::unique_ptr<Scheduler>>();
  g_zombies->push_back(std::move(s));
}

Scheduler::Scheduler(const RuntimeConfig& cfg, std::unique_ptr<Driver> driver, DriverFactory per_worker)
    : cfg_(resolve(cfg)), per_worker_drivers_(static_cast<bool>(per_worker)),
      slots_(std::make_unique<DriverSlot[]>(per_worker ? cfg_.worker_threads : 1)),
      timers_(cfg_.worker_threads, per_worker ? cfg_.worker_threads : 1), tasks_(cfg_.worker_threads + 1),
      idle_(cfg_.worker_threads) {
  if (per_worker) {
    for (std::size_t i = 0; i < cfg_.worker_threads; ++i) drivers_.push_back(per_worker(i));
  } else if (driver) {
    drivers_.push_back(std::move(driver));
  } else {
    sleep_driver_ = std::make_unique<SleepDriver>();
  }
  const std::size_t num_slots = per_worker_drivers_ ? cfg_.worker_threads : 1;
  for (std::size_t i = 0; i < num_slots; ++i) {
    slots_[i].driver = drivers_.empty() ? sleep_driver_.get() : drivers_[i].get();
    slots_[i].timers = &timers_;
    slots_[i].timer_group = i;
    slots_[i].own = per_worker_drivers_;
    slots_[i].visited_when_idle = slots_[i].driver->visited_when_idle();
    timers_.set_driver(i, slots_[i].driver);
  }
  live_ = std::make_unique<LiveSlot[]>(cfg_.worker_threads + 1);
  workers_.reserve(cfg_.worker_threads);
  for (std::size_t i = 0; i < cfg_.worker_threads; ++i) {
    workers_.push_back(std::make_unique<Worker>(this, i));
  }
  blocking_ = std::make_unique<BlockingPool>(cfg_.max_blocking_threads, cfg_.blocking_keep_alive,
                                             cfg_.thread_stack_size, cfg_.thread_name + "-blk");
}

Scheduler::~Scheduler() { shutdown(); }

void Scheduler::label_new_task(TaskHeader* t, const TaskLabel& label) {
  t->kind = label.kind;
  if (!cfg_.task_diagnostics) return;
  const ThreadContext& c = tl_ctx;
  const std::size_t shard = c.scheduler == this && c.worker != nullptr ? c.worker_index : workers_.size();
  t->diag = tasks_.attach(t, label, shard, now_ns());
}

std::vector<SlowPoll> Scheduler::slow_polls() const {
  std::vector<SlowPoll> out;
  for (const auto& w : workers_) w->slow_polls().collect(out);
  std::sort(out.begin(), out.end(), [](const SlowPoll& a, const SlowPoll& b) { return a.duration_ns > b.duration_ns; });
  return out;
}

void Scheduler::start() {
  for (auto& w : workers_) w->start();
}

bool Scheduler::is_worker_thread() const { return tl_ctx.scheduler == this; }

void Scheduler::schedule(TaskHeader* t, ScheduleKind kind) {
  if (is_shutdown_complete()) {
    t->vtable->shutdown(t);
    return;
  }
  if (t->pinned_to != 0) {
    workers_[t->pinned_to - 1u]->schedule_pinned(t);
    return;
  }
  ThreadContext& c = tl_ctx;
  if (c.scheduler == this && c.worker != nullptr) {
    c.worker->schedule_local(t, kind);
    return;
  }
  schedule_remote(t);
}

void Scheduler::schedule_remote(TaskHeader* t) {
  if (++tl_remote_sample % kRemoteSampleEvery == 0) t->ready_ns = now_ns();
  remote_schedules_.fetch_add(1, std::memory_order_relaxed);
  inject_.push(t);
  notify_parked();
}

void Scheduler::notify_parked() {
  if (auto w = idle_.worker_to_notify()) workers_[*w]->parker().unpark();
}

void Scheduler::notify_if_work_pending() {
  for (auto& w : workers_) {
    if (!w->stealer().is_empty() || !w->priority_stealer().is_empty()) {
      notify_parked();
      return;
    }
  }
  if (!inject_.is_empty()) notify_parked();
}

void Scheduler::drain_queues() {
  // Dropping a task runs destructors that may schedule more tasks (which, once shutdown is
  // complete, are dropped on the spot); loop until every queue stays empty.
  for (bool again = true; again;) {
    again = false;
    auto drop = [&again](TaskHeader* t) {
      again = true;
      t->vtable->shutdown(t);
    };
    for (auto& w : workers_) w->drain(drop);
    while (TaskHeader* t = inject_.pop()) drop(t);
  }
}

void Scheduler::shutdown() {
  if (shutdown_started_.exchange(true, std::memory_order_acq_rel)) return;
  // 1-2. Stop the workers. They notice the closed queue at their next maintenance, leave
  //    their run loops and wait (their threads stay: see 5).
  inject_.close();
  for (auto& w : workers_) w->parker().unpark();
  for (auto& w : workers_) w->wait_stopped();
  // 3. Blocking work: queued tasks are dropped, running ones finish (they may wake
  //    coroutine tasks, which land in the injection queue and are dropped below).
  blocking_->shutdown();
  // 4. From here a scheduled task is dropped immediately.
  shutdown_complete_.store(true, std::memory_order_release);
  drain_queues();
  // 5. Pending I/O and timer operations are destroyed; their handlers abort the waits,
  //    which drops the waiting tasks (and the sockets in their frames) right away. A
  //    worker's own driver is shut down by the worker's thread, one worker at a time (an
  //    io_uring ring takes submissions only from its worker's thread); a shared one here.
  timers_.shutdown();
  for (auto& w : workers_) {
    w->finish();
    w->join();
  }
  if (!per_worker_drivers_) {
    for (auto& d : drivers_) d->shutdown();
  }
  // 6. Nothing should be left, but a destructor may have scheduled something.
  drain_queues();
}

RuntimeStats Scheduler::stats() const {
  RuntimeStats s;
  s.workers.reserve(workers_.size());
  for (const auto& w : workers_) s.workers.push_back(w->published().load());
  s.injection_queue_depth = inject_.len();
  s.remote_schedules = remote_schedules_.load(std::memory_order_relaxed);
  s.blocking_threads = blocking_->num_threads();
  s.blocking_idle_threads = blocking_->num_idle();
  s.blocking_queue_depth = blocking_->queue_depth();
  return s;
}

std::vector<int> Scheduler::worker_thread_ids() const {
  std::vector<int> ids;
  for (const auto& w : workers_) ids.push_back(w->os_thread_id());
  return ids;
}

}  // namespace sg::exec
