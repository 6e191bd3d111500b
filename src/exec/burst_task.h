// A task whose work comes in bursts with long waits between them (a keep-alive
// connection: a few requests, then seconds or minutes of silence). It runs one coroutine
// per burst; between bursts it waits without any coroutine frame, on a wait that lives in
// the task itself (in its Body). An idle connection so holds one allocation instead of a
// task, the connection's frame and the awaiter inside that frame.
//
// Body's contract (every call on the task's thread, inside one of its polls, with the task
// current, so that exec waits and exec::current_task() work as in a coroutine):
//   Task<bool> burst()              the next burst: co_returns true to wait for another,
//                                   false to end the task.
//   void idle(Waker w)              arms the wait between bursts, to complete `w` (a wait
//                                   already satisfied may complete it at once).
//   BurstWake woken(const WaitResult& r)
//                                   that wait completed with `r`: stops what lost the race;
//                                   says whether the next burst starts, the task waits
//                                   again (idle() is called again: a wake that brought
//                                   nothing to do), or ends.
//   ~Body()                         the task ends: after a burst or wait said so, or when it
//                                   is cancelled (drain, runtime shutdown), idle or in a
//                                   burst (whose frame is destroyed first).
// The first poll starts a burst. An exception out of a burst, or out of starting a burst
// or a wait, ends the task.
//
// The wait between bursts is an ordinary exec wait: idle()'s Waker holds a task reference
// and a generation like a coroutine's, so a timer, the I/O driver or another task completes
// it the usual way, and a completion meant for an earlier wait (an older generation) only
// drops its reference. Scheduled like a CoroTask (CoroutineTaskVTable, exec/coro.h).
#pragma once

#include <new>
#include <utility>

#include "exec/coro.h"
#include "exec/runtime.h"

namespace sg::exec {

// What the wait between bursts completing means (Body::woken).
enum class BurstWake : uint8_t {
  kBurst,      // run the next burst
  kWaitAgain,  // nothing to do after all: arm the wait again, still without a frame
  kEnd,        // end the task
};

template <class Body>
struct BurstTask final : CoroTaskBase {
  template <class... A>
  explicit BurstTask(Scheduler* s, A&&... args)
      : CoroTaskBase(&CoroutineTaskVTable<BurstTask>::kVTable, s, task_state::kNotified + task_state::kRefOne) {
    is_coroutine = 1;
    new (&body) Body(std::forward<A>(args)...);
  }
  ~BurstTask() {}  // body is destroyed when the task ends (finish()), not with the memory

  static void* operator new(std::size_t n) { return task_alloc(n); }
  static void operator delete(void* p, std::size_t n) noexcept { task_free(p, n); }

  Task<bool> burst;  // the running burst; empty between bursts
  union {
    Body body;  // alive from construction until the task ends
  };

  // (CoroutineTaskVTable's contract.) Runs until the task waits or ends: starts a burst
  // when none runs (the first poll, or the wait between bursts completed), resumes it, and
  // when it is over arms the next wait. False: the task ends.
  bool run() noexcept {
    try {
      if (!burst.valid()) {
        // Generation 0: no wait was ever armed, so this is the first poll.
        const bool first = (wait_token.load(std::memory_order_relaxed) >> 2) == 0;
        if (!first) {
          switch (body.woken(wait_result)) {
            case BurstWake::kEnd:
              return false;
            case BurstWake::kWaitAgain:
              body.idle(arm_wait_of(this, {}));
              return true;
            case BurstWake::kBurst:
              break;
          }
        }
        burst = body.burst();
        leaf = burst.handle();
      }
      leaf.resume();
      if (!burst.done()) return true;  // suspended in the burst, or yielding
      const bool again = burst.handle().promise().take();
      burst.reset();
      if (again) body.idle(arm_wait_of(this, {}));
      return again;
    } catch (...) {
      return false;  // thrown out of the burst, or out of starting one or a wait (memory)
    }
  }
  // Destroys the burst (its frame refers to the body), then the body, with this task
  // current (their destructors cancel waits), and completes the task: after the task said
  // it ends, or on cancellation.
  void finish() noexcept {
    ThreadContext& c = tl_ctx;
    CoroTaskBase* saved = c.current;
    c.current = this;
    burst.reset();
    body.~Body();
    c.current = saved;
    complete_task(this);
  }
  void drop() noexcept { finish(); }
};

// Spawns a detached BurstTask running a Body made from `args` (constructed here, on the
// calling thread), onto the runtime running the caller.
template <class Body, class... A>
void spawn_bursts(const TaskLabel& label, A&&... args) {
  Scheduler* s = tl_ctx.scheduler;
  s->note_task_created();
  auto* t = new BurstTask<Body>(s, std::forward<A>(args)...);
  s->label_new_task(t, label);
  s->schedule(t, ScheduleKind::kWake);
}

}  // namespace sg::exec
