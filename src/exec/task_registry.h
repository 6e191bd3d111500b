// The live tasks of a runtime with task diagnostics: each task's TaskDiag record sits in
// one of the registry's shards from the task's creation until its memory is freed, so
// /debug/tasks can list every live task with its counters.
//
// Sharding: one shard per worker plus one for threads outside the runtime, each a list
// under its own lock. A task joins the shard of the thread that creates it and leaves the
// same shard (it remembers it) from whichever thread frees it; most tasks are created and
// freed on one worker, so the locks are uncontended except while a snapshot copies a
// shard. Ids are unique per runtime: a shard's counter times the number of shards plus
// the shard.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "exec/spin_lock.h"
#include "exec/task_diag.h"

namespace sg::exec {

// A copy of one live task's record, with its times derived at the snapshot's instant.
struct TaskInfo {
  enum class State : uint8_t { kIdle, kRunnable, kRunning };
  uint64_t id = 0;
  TaskKind kind = TaskKind::kTask;
  std::string name;
  State state = State::kIdle;
  uint64_t polls = 0;
  uint64_t busy_ns = 0;
  uint64_t scheduled_ns = 0;  // queued before polls (includes a wait going on now)
  uint64_t idle_ns = 0;       // neither queued nor polled: waiting for I/O, a timer, ...
  uint64_t max_poll_ns = 0;
  uint64_t age_ns = 0;
  std::array<uint64_t, kWakeSources> wakes{};
  uint32_t last_worker = kNoWorker;
};

const char* task_state_name(TaskInfo::State s) noexcept;

class TaskRegistry {
 public:
  // Records still linked belong to tasks that outlive the runtime; a zombie scheduler
  // (Scheduler::release) keeps the registry alive for them.
  explicit TaskRegistry(std::size_t shards);
  TaskRegistry(const TaskRegistry&) = delete;
  TaskRegistry& operator=(const TaskRegistry&) = delete;

  // Allocates `t`'s record (runnable from `now`: it is about to be queued) and links it
  // into `shard`.
  TaskDiag* attach(TaskHeader* t, const TaskLabel& label, std::size_t shard, uint64_t now);
  // Unlinks a record (its task is being freed); the caller frees it.
  void detach(TaskDiag* d) noexcept;
  void rename(TaskDiag* d, const TaskLabel& label) noexcept;
  // Copies a live record's name (it may be renamed concurrently).
  std::string name_of(const TaskDiag* d) const;

  std::vector<TaskInfo> snapshot(uint64_t now) const;
  // Live tasks by kind, without copying records (a /metrics scrape with 10,000 connections
  // would otherwise copy 10,000 records to count them).
  std::array<uint64_t, kTaskKinds> count_by_kind() const;
  std::size_t shards() const noexcept { return n_; }

 private:
  struct alignas(64) Shard {
    mutable SpinLock lock;
    TaskDiag* head = nullptr;
    uint64_t next_seq = 0;
  };
  std::unique_ptr<Shard[]> shards_;
  const std::size_t n_;
};

}  // namespace sg::exec
