#include "exec/task.h"

#include "exec/coro.h"

namespace sg::exec {

void set_current_task_priority(bool on) noexcept {
  CoroTaskBase* t = tl_ctx.current;
  if (t == nullptr) return;
  // Relaxed: a hint read by whoever schedules the task next; a wake racing with the
  // change may use either lane, both are correct.
  if (on) t->state.fetch_or(task_state::kPriority, std::memory_order_relaxed);
  else t->state.fetch_and(~task_state::kPriority, std::memory_order_relaxed);
}

void complete_task(JoinableTask* t) noexcept {
  using namespace task_state;
  // RUNNING -> COMPLETE in one RMW; acq_rel publishes the output to the joiner.
  uint32_t prev = t->state.fetch_xor(kRunning | kComplete, std::memory_order_acq_rel);
  if (prev & kJoinWaiter) {
    // The joiner registered before we completed; its slot is ours to fire.
    Waker w(static_cast<CoroTaskBase*>(t->join_waiter_task), t->join_waiter_gen);
    std::move(w).wake();
  }
  if (prev & kBlockingWaiter) t->state.notify_all();
  task_ref_dec(t);
}

}  // namespace sg::exec
