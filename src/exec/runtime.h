// Public API of the executor.
//
//   sg::exec::Runtime rt(cfg);                     // starts cfg.worker_threads workers
//   auto h = rt.spawn([]() -> Task<int> { co_await yield_now(); co_return 42; });
//   std::optional<int> v = h.wait();               // from a non-worker thread
//   // inside a task: exec::spawn(...), co_await handle, co_await yield_now()
//
// A callable returning Task<T> becomes a coroutine task (it can suspend, be woken,
// yield, be cancelled); any other callable becomes a closure task that runs once.
//
// Shutdown (explicit or in ~Runtime): workers stop; queued tasks and tasks suspended on
// I/O or timers are dropped (their frames destroyed, destructors run); queued blocking
// tasks are dropped and running ones finish; all threads are joined. A task suspended
// forever on a primitive that outlives the runtime (a Notify nobody notifies) is cancelled
// when that primitive is destroyed.
#pragma once

#include <memory>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "exec/config.h"
#include "exec/context.h"
#include "exec/coro.h"
#include "exec/driver.h"
#include "exec/join_handle.h"
#include "exec/scheduler.h"
#include "exec/stats.h"
#include "exec/task.h"

namespace sg::exec {

namespace detail {

// Allocates the task object for `f`: a CoroTask when f is (or returns) a Task<T>, a
// ClosureTask otherwise. Returns the task and a pointer to its output.
template <class F>
auto make_task_unlabelled(Scheduler* s, F&& f, bool with_handle) {
  using Fn = std::decay_t<F>;
  if (s != nullptr) s->note_task_created();
  if constexpr (is_task_v<Fn>) {
    using T = typename Fn::value_type;
    auto* t = new CoroTask<T, Fn>(s, Fn(std::forward<F>(f)), with_handle);
    return std::pair<JoinableTask*, TaskOutput<T>*>{t, &t->output};
  } else {
    using R = std::invoke_result_t<Fn&>;
    if constexpr (is_task_v<R>) {
      using T = typename R::value_type;
      auto* t = new CoroTask<T, Fn>(s, Fn(std::forward<F>(f)), with_handle);
      return std::pair<JoinableTask*, TaskOutput<T>*>{t, &t->output};
    } else {
      auto* t = new ClosureTask<Fn, R>(s, Fn(std::forward<F>(f)), with_handle);
      return std::pair<JoinableTask*, TaskOutput<R>*>{t, &t->output};
    }
  }
}

template <class F>
auto make_task(Scheduler* s, F&& f, bool with_handle, const TaskLabel& label) {
  auto made = make_task_unlabelled(s, std::forward<F>(f), with_handle);
  s->label_new_task(made.first, label);
  return made;
}

template <class F>
using spawn_output_t = typename std::remove_pointer_t<
    decltype(make_task_unlabelled(nullptr, std::declval<F>(), true).second)>;
template <class O>
struct output_value;
template <class T>
struct output_value<TaskOutput<T>> {
  using type = T;
};
template <class F>
using spawn_value_t = typename output_value<spawn_output_t<F>>::type;

}  // namespace detail

class Handle {
 public:
  Handle() = default;
  explicit Handle(Scheduler* s) noexcept : s_(s) {}

  // The runtime of the calling worker thread; invalid (valid() == false) elsewhere.
  static Handle current() noexcept { return Handle(tl_ctx.scheduler); }

  bool valid() const noexcept { return s_ != nullptr; }
  Scheduler* scheduler() const noexcept { return s_; }
  const RuntimeConfig& config() const noexcept { return s_->config(); }
  RuntimeStats stats() const { return s_->stats(); }

  // `label` names the task in /debug/tasks and long-poll reports (task_diag.h).
  template <class F>
  JoinHandle<detail::spawn_value_t<F>> spawn(F&& f, const TaskLabel& label = {}) const {
    auto [t, out] = detail::make_task(s_, std::forward<F>(f), true, label);
    s_->schedule(t, ScheduleKind::kWake);
    return JoinHandle<detail::spawn_value_t<F>>(t, out);
  }

  // Like spawn, without a JoinHandle: the cheapest path for fire-and-forget tasks.
  template <class F>
  void spawn_detached(F&& f, const TaskLabel& label = {}) const {
    auto [t, out] = detail::make_task(s_, std::forward<F>(f), false, label);
    (void)out;
    s_->schedule(t, ScheduleKind::kWake);
  }

  // Spawns `f` pinned to worker `worker` (modulo the worker count), from any thread: see
  // spawn_local, which pins to the calling worker.
  template <class F>
  JoinHandle<detail::spawn_value_t<F>> spawn_pinned(std::size_t worker, F&& f, const TaskLabel& label = {}) const {
    auto [t, out] = detail::make_task(s_, std::forward<F>(f), true, label);
    t->pinned_to = static_cast<uint16_t>(worker % s_->num_workers() + 1);
    s_->schedule(t, ScheduleKind::kWake);
    return JoinHandle<detail::spawn_value_t<F>>(t, out);
  }

  // Runs a blocking callable on the blocking pool, never on a worker.
  template <class F>
  JoinHandle<std::invoke_result_t<std::decay_t<F>&>> spawn_blocking(F&& f, std::string_view name = {}) const {
    using Fn = std::decay_t<F>;
    using R = std::invoke_result_t<Fn&>;
    static_assert(!is_task_v<R>, "spawn_blocking takes a plain callable");
    s_->note_task_created();
    auto* t = new ClosureTask<Fn, R>(s_, Fn(std::forward<F>(f)), true);
    s_->label_new_task(t, TaskLabel{TaskKind::kBlocking, name});
    s_->blocking().spawn(t);
    return JoinHandle<R>(t, &t->output);
  }

  friend bool operator==(const Handle&, const Handle&) = default;

 private:
  Scheduler* s_ = nullptr;
};

class Runtime {
 public:
  explicit Runtime(RuntimeConfig cfg = {}, std::unique_ptr<Driver> driver = nullptr)
      : s_(std::make_unique<Scheduler>(cfg, std::move(driver))) {
    s_->start();
  }
  // A runtime whose workers each drive their own I/O driver, made by `per_worker`.
  Runtime(RuntimeConfig cfg, DriverFactory per_worker)
      : s_(std::make_unique<Scheduler>(cfg, nullptr, std::move(per_worker))) {
    s_->start();
  }
  ~Runtime() { Scheduler::release(std::move(s_)); }
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  Handle handle() const noexcept { return Handle(s_.get()); }
  const RuntimeConfig& config() const noexcept { return s_->config(); }
  RuntimeStats stats() const { return s_->stats(); }
  // The kernel's ids of the worker threads, by index (0 for one not started yet).
  std::vector<int> worker_thread_ids() const { return s_->worker_thread_ids(); }

  template <class F>
  auto spawn(F&& f, const TaskLabel& label = {}) const {
    return handle().spawn(std::forward<F>(f), label);
  }
  template <class F>
  void spawn_detached(F&& f, const TaskLabel& label = {}) const {
    handle().spawn_detached(std::forward<F>(f), label);
  }
  template <class F>
  auto spawn_blocking(F&& f) const {
    return handle().spawn_blocking(std::forward<F>(f));
  }
  // Spawns `f` and blocks the calling (non-worker) thread until it completes.
  template <class F>
  auto block_on(F&& f) const {
    auto h = spawn(std::forward<F>(f));
    return h.wait();
  }

  void shutdown() { s_->shutdown(); }

 private:
  std::unique_ptr<Scheduler> s_;
};

// Inside a task: spawn onto the runtime running the caller.
template <class F>
auto spawn(F&& f, const TaskLabel& label = {}) {
  return Handle::current().spawn(std::forward<F>(f), label);
}
template <class F>
void spawn_detached(F&& f, const TaskLabel& label = {}) {
  Handle::current().spawn_detached(std::forward<F>(f), label);
}

// Inside a task on a worker: spawns `f` pinned to the calling worker (Tokio's LocalSet /
// spawn_local). It is queued only on this worker's pinned FIFO and never stolen, so it
// always runs on this worker's thread and may hold state that is not thread-safe (shared
// with other tasks pinned to the same worker). Its wake-ups from any thread come back here.
// When the runtime stops, this worker drops its queued pinned tasks in queue order on its
// own thread; pinned tasks still suspended then are dropped after the worker has exited
// (their destructors run on the thread shutting the runtime down, never concurrently with
// the worker). Throws std::logic_error outside a worker thread.
template <class F>
auto spawn_local(F&& f, const TaskLabel& label = {}) {
  const ThreadContext& c = tl_ctx;
  if (c.worker == nullptr) throw std::logic_error("exec::spawn_local outside a worker thread");
  return Handle(c.scheduler).spawn_pinned(c.worker_index, std::forward<F>(f), label);
}

// Renames the running coroutine task (a connection task naming itself after its peer).
// No-op outside a task.
void label_current_task(const TaskLabel& label) noexcept;
template <class F>
auto spawn_blocking(F&& f) {
  return Handle::current().spawn_blocking(std::forward<F>(f));
}

}  // namespace sg::exec
