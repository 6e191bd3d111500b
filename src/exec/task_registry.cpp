#include "exec/task_registry.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "exec/alloc.h"
#include "exec/context.h"
#include "exec/coro.h"
#include "exec/runtime.h"
#include "exec/scheduler.h"
#include "exec/task.h"
#include "exec/worker.h"

namespace sg::exec {

const char* task_kind_name(TaskKind k) noexcept {
  switch (k) {
    case TaskKind::kTask: return "task";
    case TaskKind::kListener: return "listener";
    case TaskKind::kConnection: return "connection";
    case TaskKind::kRequest: return "request";
    case TaskKind::kHealthCheck: return "health_check";
    case TaskKind::kAdmin: return "admin";
    case TaskKind::kProbe: return "probe";
    case TaskKind::kMaintenance: return "maintenance";
    case TaskKind::kBlocking: return "blocking";
  }
  return "task";
}

const char* wake_source_name(WakeSource s) noexcept {
  switch (s) {
    case WakeSource::kLocal: return "local";
    case WakeSource::kRemote: return "remote";
    case WakeSource::kIo: return "io";
    case WakeSource::kTimer: return "timer";
  }
  return "local";
}

const char* task_state_name(TaskInfo::State s) noexcept {
  switch (s) {
    case TaskInfo::State::kIdle: return "idle";
    case TaskInfo::State::kRunnable: return "runnable";
    case TaskInfo::State::kRunning: return "running";
  }
  return "idle";
}

void* TaskDiag::operator new(std::size_t n) { return task_alloc(n); }
void TaskDiag::operator delete(void* p, std::size_t n) noexcept { task_free(p, n); }

namespace {

void copy_name(TaskDiag* d, std::string_view name) noexcept {
  std::size_t n = std::min(name.size(), kTaskNameMax - 1);
  if (n != 0) std::memcpy(d->name, name.data(), n);  // an empty view may have no data()
  d->name[n] = '\0';
}

// The time a wake or queueing happens: inside a poll, the poll's clock reading (at most
// one poll's duration early); in a driver dispatch, one reading for all its wakes (the
// completions of one reap were ready together); elsewhere a fresh reading.
uint64_t stamp_now() noexcept {
  ThreadContext& c = tl_ctx;
  if (c.budget_active && c.tick_now_valid) {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     c.tick_now.time_since_epoch()).count());
  }
  if (c.in_driver) {
    if (c.driver_stamp_ns == 0) c.driver_stamp_ns = now_ns();
    return c.driver_stamp_ns;
  }
  return now_ns();
}

}  // namespace

void note_wake(TaskHeader* t) noexcept {
  const ThreadContext& c = tl_ctx;
  WakeSource src = WakeSource::kRemote;
  if (c.in_timers) src = WakeSource::kTimer;
  else if (c.in_driver) src = WakeSource::kIo;
  else if (c.scheduler == t->scheduler && c.worker != nullptr) src = WakeSource::kLocal;
  t->diag->wakes[static_cast<std::size_t>(src)].fetch_add(1, std::memory_order_relaxed);
}

void note_runnable(TaskHeader* t) noexcept { t->diag->ready_at_ns.store(stamp_now(), std::memory_order_relaxed); }

void release_task_diag(TaskHeader* t) noexcept {
  TaskDiag* d = std::exchange(t->diag, nullptr);
  t->scheduler->tasks().detach(d);
  delete d;
}

void label_current_task(const TaskLabel& label) noexcept {
  CoroTaskBase* t = tl_ctx.current;
  if (t == nullptr) return;
  t->kind = label.kind;
  if (t->diag != nullptr) t->scheduler->tasks().rename(t->diag, label);
}

TaskRegistry::TaskRegistry(std::size_t shards) : shards_(std::make_unique<Shard[]>(shards)), n_(shards) {}

TaskDiag* TaskRegistry::attach(TaskHeader* t, const TaskLabel& label, std::size_t shard, uint64_t now) {
  auto* d = new TaskDiag();
  d->task = t;
  d->kind = label.kind;
  d->created_ns = now;
  d->shard = static_cast<uint32_t>(shard);
  d->ready_at_ns.store(now, std::memory_order_relaxed);
  copy_name(d, label.name);
  Shard& s = shards_[shard];
  std::lock_guard lk(s.lock);
  d->id = s.next_seq++ * n_ + shard + 1;
  d->next = s.head;
  if (s.head != nullptr) s.head->prev = d;
  s.head = d;
  return d;
}

void TaskRegistry::detach(TaskDiag* d) noexcept {
  Shard& s = shards_[d->shard];
  std::lock_guard lk(s.lock);
  if (d->prev != nullptr) d->prev->next = d->next;
  else s.head = d->next;
  if (d->next != nullptr) d->next->prev = d->prev;
  d->prev = d->next = nullptr;
  d->task = nullptr;
}

void TaskRegistry::rename(TaskDiag* d, const TaskLabel& label) noexcept {
  std::lock_guard lk(shards_[d->shard].lock);
  d->kind = label.kind;
  copy_name(d, label.name);
}

std::string TaskRegistry::name_of(const TaskDiag* d) const {
  std::lock_guard lk(shards_[d->shard].lock);
  return d->name;
}

namespace {

TaskInfo info_of(const TaskDiag& d, uint64_t now) {
  constexpr auto r = std::memory_order_relaxed;
  TaskInfo i;
  i.id = d.id;
  i.kind = d.kind;
  i.name = d.name;
  const uint32_t st = d.task->state.load(r);
  if (st & task_state::kRunning) i.state = TaskInfo::State::kRunning;
  else if (st & task_state::kNotified) i.state = TaskInfo::State::kRunnable;
  i.polls = d.polls.load(r);
  i.busy_ns = d.busy_ns.load(r);
  i.scheduled_ns = d.scheduled_ns.load(r);
  const uint64_t ready = d.ready_at_ns.load(r);
  if (i.state == TaskInfo::State::kRunnable && ready != 0 && now > ready) i.scheduled_ns += now - ready;
  i.max_poll_ns = d.max_poll_ns.load(r);
  i.age_ns = now > d.created_ns ? now - d.created_ns : 0;
  const uint64_t accounted = i.busy_ns + i.scheduled_ns;
  i.idle_ns = i.age_ns > accounted ? i.age_ns - accounted : 0;
  for (std::size_t k = 0; k < kWakeSources; ++k) i.wakes[k] = d.wakes[k].load(r);
  i.last_worker = d.last_worker.load(r);
  return i;
}

}  // namespace

std::vector<TaskInfo> TaskRegistry::snapshot(uint64_t now) const {
  std::vector<TaskInfo> out;
  for (std::size_t i = 0; i < n_; ++i) {
    std::lock_guard lk(shards_[i].lock);
    for (const TaskDiag* d = shards_[i].head; d != nullptr; d = d->next) out.push_back(info_of(*d, now));
  }
  return out;
}

std::array<uint64_t, kTaskKinds> TaskRegistry::count_by_kind() const {
  std::array<uint64_t, kTaskKinds> by_kind{};
  for (std::size_t i = 0; i < n_; ++i) {
    std::lock_guard lk(shards_[i].lock);  // rename() changes a record's kind under it
    for (const TaskDiag* d = shards_[i].head; d != nullptr; d = d->next) ++by_kind[static_cast<std::size_t>(d->kind)];
  }
  return by_kind;
}

}  // namespace sg::exec
