// Coroutine tasks.
//
// Task<T> is a lazily started coroutine. Awaiting a Task<T> from another coroutine runs it
// inline (see Task::operator co_await for how the stack stays bounded), so a spawned root
// coroutine and everything it awaits form one executor task, like a Rust future tree. A root is wrapped in a CoroTask: the task
// header, the resume point ("leaf": the innermost suspended coroutine) and a wait token.
//
// Waits. A leaf awaiter that suspends calls arm_wait(h), which records h and returns a
// Waker holding a task reference. Whoever completes the operation calls
// std::move(waker).wake(result). The wait token (generation << 2 | phase) makes that
// race-free:
//   * arm:      token = (gen+1) << 2 | ARMED         (task thread, while RUNNING)
//   * complete: CAS ARMED -> COMPLETING, write wait_result, store IDLE (release), wake
//     Only one completer wins; later or stale completers (older generation) fail the CAS
//     and only drop their reference.
//   * poll:     a poll that finds the token ARMED or COMPLETING is spurious (e.g. a
//     cancellation) and does not resume the coroutine.
// A coroutine must only co_await Task<T> and this library's awaitables.
//
// Compiler caveat (GCC 12, verified): never pass a temporary (prvalue) of a class type with
// a non-trivial destructor *by value* into a coroutine, e.g. `co_await f(std::string("x"))`
// or `co_await f(Reply{...})`: GCC destroys that parameter twice (heap corruption). Pass
// a named object (`f(std::move(r))`) or a reference, or a trivially destructible type.
#pragma once

#include <coroutine>
#include <cstdint>
#include <exception>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

#include "exec/context.h"
#include "exec/task.h"

namespace sg::exec {

// Result of a completed wait. A plain aggregate: constructing std::error_code calls
// system_category() out of line, which the hot wake path should not pay for nothing.
struct WaitResult {
  int code = 0;                                  // 0: success
  // Which of a wait's raced operations completed (a tag, io/wait.h); what an operation
  // transferred stays with the operation. 32 bits, beside `code`: every task carries one,
  // and an idle connection is its task alone (proxy/session.cpp).
  uint32_t value = 0;
  const std::error_category* category = nullptr;

  WaitResult() = default;
  WaitResult(std::error_code e, std::size_t tag = 0) noexcept  // NOLINT(google-explicit-constructor)
      : code(e.value()), value(static_cast<uint32_t>(tag)), category(e ? &e.category() : nullptr) {}
  std::error_code ec() const noexcept {
    return code == 0 ? std::error_code{} : std::error_code(code, *category);
  }
};

namespace wait_phase {
inline constexpr uint64_t kIdle = 0;
inline constexpr uint64_t kArmed = 1;
inline constexpr uint64_t kCompleting = 2;
inline constexpr uint64_t kMask = 3;
}  // namespace wait_phase

struct CoroTaskBase : JoinableTask {
  using JoinableTask::JoinableTask;
  std::coroutine_handle<> leaf;         // where the next poll resumes
  std::atomic<uint64_t> wait_token{0};  // (generation << 2) | phase
  WaitResult wait_result;               // written by the winning completer
};

// Completes one armed wait of a coroutine task. Move-only; holds one task reference.
class Waker {
 public:
  Waker() = default;
  Waker(CoroTaskBase* t, uint64_t gen) noexcept : t_(t), gen_(gen) {}  // adopts a reference
  Waker(Waker&& o) noexcept : t_(std::exchange(o.t_, nullptr)), gen_(o.gen_) {}
  Waker& operator=(Waker&& o) noexcept {
    if (this != &o) {
      reset();
      t_ = std::exchange(o.t_, nullptr);
      gen_ = o.gen_;
    }
    return *this;
  }
  Waker(const Waker&) = delete;
  Waker& operator=(const Waker&) = delete;
  ~Waker() { reset(); }

  explicit operator bool() const noexcept { return t_ != nullptr; }
  CoroTaskBase* task() const noexcept { return t_; }
  uint64_t generation() const noexcept { return gen_; }

  Waker clone() const noexcept {
    task_ref_inc(t_);
    return Waker(t_, gen_);
  }

  // Gives up the reference without dropping it (to store in a raw slot).
  CoroTaskBase* release() noexcept { return std::exchange(t_, nullptr); }

  // Completes the wait with `r` if it is still armed for this generation. Consumes the
  // waker. Returns true when this call completed the wait.
  bool wake(WaitResult r = {}, ScheduleKind kind = ScheduleKind::kWake) && noexcept {
    CoroTaskBase* t = std::exchange(t_, nullptr);
    if (t == nullptr) return false;
    uint64_t armed = (gen_ << 2) | wait_phase::kArmed;
    bool won = t->wait_token.compare_exchange_strong(
        armed, (gen_ << 2) | wait_phase::kCompleting, std::memory_order_acquire,
        std::memory_order_relaxed);
    if (won) {
      t->wait_result = r;
      // Publishes wait_result to the poll that sees IDLE.
      t->wait_token.store(gen_ << 2, std::memory_order_release);
      wake_task(t, kind);
    }
    task_ref_dec(t);
    return won;
  }

 private:
  void reset() noexcept {
    if (t_ != nullptr) task_ref_dec(std::exchange(t_, nullptr));
  }
  CoroTaskBase* t_ = nullptr;
  uint64_t gen_ = 0;
};

// The coroutine task being polled on this thread (nullptr outside one).
inline CoroTaskBase* current_task() noexcept { return tl_ctx.current; }

// Records h as the resume point of task `t` and arms a new wait of `t`. Called on the
// thread polling `t` (an empty h: a BurstTask's wait between bursts, exec/burst_task.h).
inline Waker arm_wait_of(CoroTaskBase* t, std::coroutine_handle<> h) noexcept {
  t->leaf = h;
  uint64_t gen = (t->wait_token.load(std::memory_order_relaxed) >> 2) + 1;
  // Release: a completer that acquires the ARMED token sees leaf and whatever the awaiter
  // prepared before arming.
  t->wait_token.store((gen << 2) | wait_phase::kArmed, std::memory_order_release);
  task_ref_inc(t);
  return Waker(t, gen);
}
// Inside await_suspend(h): arm_wait_of the current task. Must be called on the task's own
// thread while it runs.
inline Waker arm_wait(std::coroutine_handle<> h) noexcept {
  CoroTaskBase* t = tl_ctx.current;
  assert(t != nullptr && "exec awaitables must be awaited inside an executor task");
  return arm_wait_of(t, h);
}

// Arms a wait like arm_wait, without taking a task reference, for primitives that
// complete the wait while holding the lock the waiter's destructor also takes (so the
// task cannot be dropped while it is being woken). Complete it with
// complete_wait_exclusive, under that lock.
inline uint64_t arm_wait_unowned(std::coroutine_handle<> h) noexcept {
  CoroTaskBase* t = tl_ctx.current;
  assert(t != nullptr && "exec awaitables must be awaited inside an executor task");
  t->leaf = h;
  uint64_t gen = (t->wait_token.load(std::memory_order_relaxed) >> 2) + 1;
  t->wait_token.store((gen << 2) | wait_phase::kArmed, std::memory_order_release);
  return gen;
}

// Completes a wait armed with arm_wait_unowned. The caller guarantees it is the only
// possible completer (so no CAS is needed) and that the task stays alive during the call.
inline void complete_wait_exclusive(CoroTaskBase* t, uint64_t gen, WaitResult r = {},
                                    ScheduleKind kind = ScheduleKind::kWake) noexcept {
  t->wait_result = r;
  // Publishes wait_result to the poll that sees IDLE.
  t->wait_token.store(gen << 2, std::memory_order_release);
  wake_task(t, kind);
}

// Abandons the current task's armed wait (the awaiter decided not to suspend after all).
// Returns false when a completer already claimed it.
inline bool disarm_wait(CoroTaskBase* t, uint64_t gen) noexcept {
  uint64_t armed = (gen << 2) | wait_phase::kArmed;
  return t->wait_token.compare_exchange_strong(armed, gen << 2, std::memory_order_acq_rel,
                                               std::memory_order_relaxed);
}

// Reads the result a completer stored for the last wait of the current task.
inline const WaitResult& last_wait_result() noexcept { return tl_ctx.current->wait_result; }

// Makes the current task yield: it goes to the back of its worker's local queue.
struct YieldAwaiter {
  bool forced = false;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) const noexcept {
    ThreadContext& c = tl_ctx;
    c.current->leaf = h;
    c.yield_requested = true;
    if (forced && c.counters != nullptr) ++c.counters->forced_yields;
  }
  void await_resume() const noexcept {}
};

inline YieldAwaiter yield_now() noexcept { return {}; }

// Yields only when the task's budget is exhausted (counted as a forced yield); spends one
// unit otherwise. Use in loops that may complete many operations without suspending.
struct CoopCheckpoint {
  bool await_ready() const noexcept { return coop_proceed(); }
  void await_suspend(std::coroutine_handle<> h) const noexcept { YieldAwaiter{true}.await_suspend(h); }
  void await_resume() const noexcept {}
};
inline CoopCheckpoint coop_checkpoint() noexcept { return {}; }

// ---------------------------------------------------------------------------------------

template <class T = void>
class Task;

namespace detail {

struct PromiseBase {
  std::coroutine_handle<> continuation;
  std::exception_ptr error;
  // True while the awaiting coroutine is inside Task's await_suspend, running this one
  // inline. Only the task's own poll touches it (one thread at a time), so it is plain.
  bool started_inline = false;

  static void* operator new(std::size_t n) { return task_alloc(n); }
  static void operator delete(void* p, std::size_t n) noexcept { task_free(p, n); }

  std::suspend_always initial_suspend() const noexcept { return {}; }

  struct FinalAwaiter {
    bool await_ready() const noexcept { return false; }
    template <class P>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<P> h) const noexcept {
      auto& p = h.promise();
      // Completed without ever suspending: return to the awaiter's await_suspend, which
      // continues the parent without a nested resume.
      if (p.started_inline) return std::noop_coroutine();
      std::coroutine_handle<> c = p.continuation;
      return c ? c : std::noop_coroutine();
    }
    void await_resume() const noexcept {}
  };
  FinalAwaiter final_suspend() const noexcept { return {}; }
  void unhandled_exception() noexcept { error = std::current_exception(); }
};

template <class T>
struct Promise : PromiseBase {
  std::optional<T> value;
  Task<T> get_return_object() noexcept;
  template <class U>
  void return_value(U&& v) {
    value.emplace(std::forward<U>(v));
  }
  T take() {
    if (error) std::rethrow_exception(error);
    return std::move(*value);
  }
};

template <>
struct Promise<void> : PromiseBase {
  Task<void> get_return_object() noexcept;
  void return_void() noexcept {}
  void take() {
    if (error) std::rethrow_exception(error);
  }
};

}  // namespace detail

template <class T>
class [[nodiscard]] Task {
 public:
  using promise_type = detail::Promise<T>;
  using handle_type = std::coroutine_handle<promise_type>;
  using value_type = T;

  Task() = default;
  explicit Task(handle_type h) noexcept : h_(h) {}
  Task(Task&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  Task& operator=(Task&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, {});
    }
    return *this;
  }
  ~Task() { reset(); }

  bool valid() const noexcept { return static_cast<bool>(h_); }
  bool done() const noexcept { return h_.done(); }
  handle_type handle() const noexcept { return h_; }
  void reset() noexcept {
    if (h_) std::exchange(h_, {}).destroy();
  }

  // Runs the task inline in the awaiting coroutine's executor task.
  //
  // Why not plain symmetric transfer (return h from await_suspend): it needs the compiler
  // to turn each resume into a tail call, which GCC does not under ASan or -O0. A loop
  // whose awaited tasks complete synchronously (a body relay with data always ready)
  // would then nest one frame pair per iteration and overflow the stack. Here a child
  // that finishes without suspending returns to this await_suspend (final_suspend sees
  // started_inline) and the parent continues with `return false`: constant stack.
  // A child that really suspended resumes the parent from its final_suspend later; that
  // nesting lasts only until the next real suspension.
  auto operator co_await() && noexcept {
    struct Awaiter {
      handle_type h;
      bool await_ready() const noexcept { return !h || h.done(); }
      bool await_suspend(std::coroutine_handle<> cont) const noexcept {
        auto& p = h.promise();
        p.continuation = cont;
        p.started_inline = true;
        h.resume();
        if (h.done()) return false;  // completed inline: continue the parent now
        p.started_inline = false;    // suspended: it resumes `cont` when it completes
        return true;
      }
      T await_resume() const { return h.promise().take(); }
    };
    return Awaiter{h_};
  }

 private:
  handle_type h_;
};

namespace detail {
template <class T>
Task<T> Promise<T>::get_return_object() noexcept {
  return Task<T>(std::coroutine_handle<Promise<T>>::from_promise(*this));
}
inline Task<void> Promise<void>::get_return_object() noexcept {
  return Task<void>(std::coroutine_handle<Promise<void>>::from_promise(*this));
}

template <class X>
struct is_task : std::false_type {};
template <class T>
struct is_task<Task<T>> : std::true_type {};
}  // namespace detail

template <class X>
inline constexpr bool is_task_v = detail::is_task<std::remove_cvref_t<X>>::value;

// The scheduling of a task that runs coroutines and waits with Wakers (CoroTask,
// BurstTask: exec/burst_task.h). T provides
//   bool run() noexcept     resumes its work with the task current; false: it finished
//   void finish() noexcept  it finished: publishes its output, releases what it holds and
//                           completes the task
//   void drop() noexcept    it is cancelled or the runtime shuts down: drops its work
//                           (destructors run with the task current) and completes the task
template <class T>
struct CoroutineTaskVTable {
  static void poll(TaskHeader* h) noexcept {
    using namespace task_state;
    auto* self = static_cast<T*>(h);
    const uint32_t prev = h->state.fetch_xor(kNotified | kRunning, std::memory_order_acq_rel);
    if (prev & kCancelled) {
      self->drop();
      return;
    }
    // ARMED or COMPLETING: a spurious poll (see the wait token above); the wait's
    // completer wakes the task again.
    const uint64_t token = self->wait_token.load(std::memory_order_acquire);
    if ((token & wait_phase::kMask) == wait_phase::kIdle) {
      ThreadContext& c = tl_ctx;
      CoroTaskBase* saved = c.current;
      c.current = self;
      c.yield_requested = false;
      const bool suspended = self->run();
      c.current = saved;
      if (!suspended) {
        self->finish();
        return;
      }
      if (std::exchange(c.yield_requested, false)) {
        // A yield goes to the back of the queue: RUNNING -> NOTIFIED, then requeued.
        uint32_t s = h->state.load(std::memory_order_relaxed);
        while (!h->state.compare_exchange_weak(s, (s & ~kRunning) | kNotified, std::memory_order_acq_rel,
                                               std::memory_order_relaxed)) {
        }
        schedule_task(h, ScheduleKind::kYield);
        return;
      }
    }
    release_running(h);
  }

  static void shutdown(TaskHeader* h) noexcept {
    h->state.fetch_xor(task_state::kNotified | task_state::kRunning, std::memory_order_acq_rel);
    static_cast<T*>(h)->drop();
  }

  static void dealloc(TaskHeader* h) noexcept {
    Scheduler* s = h->scheduler;
    if (h->diag != nullptr) release_task_diag(h);
    delete static_cast<T*>(h);
    note_task_freed(s);
  }

  static constexpr TaskVTable kVTable{&poll, &shutdown, &dealloc};

 private:
  // RUNNING cleared; requeued if the task was woken while it ran (by another worker's
  // driver poll, say: the wake of an admitted request still goes to the priority lane).
  static void release_running(TaskHeader* h) noexcept {
    const uint32_t prev = h->state.fetch_and(~task_state::kRunning, std::memory_order_acq_rel);
    if (prev & task_state::kNotified) schedule_task(h, ScheduleKind::kRequeue);
  }
};

// A spawned root coroutine. F is the callable that produced the Task (kept alive for the
// task's lifetime so that lambda captures outlive the coroutine that refers to them).
template <class T, class F>
struct CoroTask final : CoroTaskBase {
  CoroTask(Scheduler* s, F&& f, bool with_handle)
      : CoroTaskBase(&CoroutineTaskVTable<CoroTask>::kVTable, s,
                     task_state::kNotified + task_state::kRefOne +
                         (with_handle ? task_state::kJoinInterest + task_state::kRefOne : 0)),
        fn(keep_fn(f)),
        root(make_root(f, fn)) {
    is_coroutine = 1;
    leaf = root.handle();
  }

  static void* operator new(std::size_t n) { return task_alloc(n); }
  static void operator delete(void* p, std::size_t n) noexcept { task_free(p, n); }

  // A Task spawned as such needs nothing kept beside it: no slot for it (the task record
  // of every connection is 16 bytes smaller, which puts it in a smaller allocation class).
  static constexpr bool kSpawnedTask = std::is_same_v<std::remove_cvref_t<F>, Task<T>>;
  struct NoFn {
    void reset() noexcept {}
  };
  using FnSlot = std::conditional_t<kSpawnedTask, NoFn, std::optional<F>>;

  [[no_unique_address]] FnSlot fn;  // released together with the frame
  Task<T> root;
  TaskOutput<T> output;

  static FnSlot keep_fn(F& f) {
    if constexpr (kSpawnedTask) {
      return NoFn{};
    } else {
      return FnSlot(std::move(f));
    }
  }
  static Task<T> make_root(F& f, FnSlot& slot) {
    if constexpr (kSpawnedTask) {
      return std::move(f);
    } else {
      return (*slot)();
    }
  }

  void finish_output() noexcept {
    try {
      if constexpr (std::is_void_v<T>) {
        root.handle().promise().take();
        output.value = true;
      } else {
        output.value.emplace(root.handle().promise().take());
      }
    } catch (...) {
      output.error = std::current_exception();
    }
  }

  // (CoroutineTaskVTable's contract.)
  bool run() noexcept {
    leaf.resume();
    return !root.done();
  }
  void finish() noexcept {
    finish_output();
    root.reset();
    fn.reset();
    complete_task(this);
  }
  void drop() noexcept {
    // Destroying the frame runs the destructors of everything suspended in it; awaiters
    // deregister themselves and I/O objects cancel their pending operations.
    ThreadContext& c = tl_ctx;
    CoroTaskBase* saved = c.current;
    c.current = this;
    root.reset();
    fn.reset();
    c.current = saved;
    complete_task(this);
  }
};

}  // namespace sg::exec
