// Per-task diagnostics: what a task is (kind and name) and how it has been scheduled
// (polls, busy time, time runnable before its polls, wakes by source, last worker). The
// kind lives in every task header; the rest is a TaskDiag record that a runtime with
// RuntimeConfig::task_diagnostics attaches to each task it creates (task_registry.h), so
// a runtime without it pays one null check per poll and per wake.
//
// Who writes what. A task is polled by one thread at a time, but successive polls may run
// on different workers, and a poll's bookkeeping after the task's own state transition
// can overlap the next poll elsewhere: the counters are therefore relaxed atomic RMWs
// (readers on the admin thread see each counter whole, never a torn value; no ordering
// between counters is promised). ready_at_ns is written by whoever queues the task and
// read by the poll that dequeues it: the queue's release/acquire orders the two. The name
// is written only under the registry shard's lock and copied out under it.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sg::exec {

struct TaskHeader;

// What a task does, for people reading /debug/tasks and long-poll logs. The executor
// itself never looks at it.
enum class TaskKind : uint8_t {
  kTask,         // not labelled
  kListener,     // an accept loop
  kConnection,   // a client connection and the requests on it
  kRequest,      // work of one request beside its connection (a request-body relay)
  kHealthCheck,  // an upstream endpoint's health-check loop
  kAdmin,        // the admin endpoint
  kProbe,        // a periodic measurement (the scheduling-delay probe)
  kMaintenance,  // periodic housekeeping (a worker's upstream pool reaper)
  kBlocking,     // a closure on the blocking pool
};
inline constexpr std::size_t kTaskKinds = 9;
const char* task_kind_name(TaskKind k) noexcept;

// Who queued a task for its next poll.
enum class WakeSource : uint8_t {
  kLocal,   // a task on one of its runtime's workers (or its own spawn / yield)
  kRemote,  // a thread outside the runtime's workers
  kIo,      // an I/O completion dispatched by a worker's driver
  kTimer,   // a deadline of the timing wheel
};
inline constexpr std::size_t kWakeSources = 4;
const char* wake_source_name(WakeSource s) noexcept;

// A task's kind and a short name (truncated to kTaskNameMax - 1 bytes), given at spawn or
// by the task itself (label_current_task).
struct TaskLabel {
  TaskKind kind = TaskKind::kTask;
  std::string_view name;
};

inline constexpr std::size_t kTaskNameMax = 48;
inline constexpr uint32_t kNoWorker = ~0u;

struct TaskDiag {
  // Registry links and identity: written under the shard's lock.
  TaskDiag* prev = nullptr;
  TaskDiag* next = nullptr;
  TaskHeader* task = nullptr;
  uint64_t id = 0;
  uint64_t created_ns = 0;
  uint32_t shard = 0;
  TaskKind kind = TaskKind::kTask;
  char name[kTaskNameMax] = {};

  std::atomic<uint64_t> polls{0};
  std::atomic<uint64_t> busy_ns{0};       // time inside polls
  std::atomic<uint64_t> scheduled_ns{0};  // time queued (runnable) before those polls
  std::atomic<uint64_t> max_poll_ns{0};
  std::atomic<uint64_t> ready_at_ns{0};   // when it was last queued; 0 while not queued
  std::array<std::atomic<uint64_t>, kWakeSources> wakes{};
  std::atomic<uint32_t> last_worker{kNoWorker};

  static void* operator new(std::size_t n);
  static void operator delete(void* p, std::size_t n) noexcept;
};

// Out-of-line bookkeeping, called only for tasks that carry a record.
void note_wake(TaskHeader* t) noexcept;      // counts the wake by its source
void note_runnable(TaskHeader* t) noexcept;  // stamps ready_at_ns
// Detaches and frees the record of a task being freed. (A worker holds a reference to a
// task with a record across its poll, so the record outlives the poll's bookkeeping.)
void release_task_diag(TaskHeader* t) noexcept;

}  // namespace sg::exec
