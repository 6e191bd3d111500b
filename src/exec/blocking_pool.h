// Elastic pool for blocking work (getaddrinfo, file reads): threads start on demand up to
// max_blocking_threads and exit after blocking_keep_alive idle. Tasks are ordinary
// ClosureTasks, so spawn_blocking returns the same JoinHandle as spawn.
#pragma once

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <list>
#include <mutex>
#include <string>
#include <vector>

#include "exec/task.h"

namespace sg::exec {

class BlockingPool {
 public:
  BlockingPool(std::size_t max_threads, std::chrono::milliseconds keep_alive,
               std::size_t stack_size, std::string name);
  ~BlockingPool();
  BlockingPool(const BlockingPool&) = delete;
  BlockingPool& operator=(const BlockingPool&) = delete;

  // Queues a NOTIFIED task; a pool thread polls it. After shutdown the task is dropped.
  void spawn(TaskHeader* t);
  // Drops queued tasks, waits for running ones, joins every thread.
  void shutdown();

  std::size_t num_threads() const;
  std::size_t num_idle() const;
  std::size_t queue_depth() const;

 private:
  struct Thread {
    pthread_t handle{};
    bool exited = false;
  };
  static void* thread_main(void* arg);
  void run(Thread* self);
  void reap_exited_locked(std::vector<pthread_t>& to_join);

  const std::size_t max_threads_;
  const std::chrono::milliseconds keep_alive_;
  const std::size_t stack_size_;
  const std::string name_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TaskHeader*> queue_;
  std::list<Thread> threads_;
  std::size_t num_idle_ = 0;
  std::size_t pending_wakeups_ = 0;
  bool shutdown_ = false;
};

}  // namespace sg::exec
