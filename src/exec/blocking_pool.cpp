#include "exec/blocking_pool.h"

#include <algorithm>
#include <stdexcept>

namespace sg::exec {

namespace {
struct StartArg {
  class BlockingPool* pool;
  void* thread;
};
}  // namespace

BlockingPool::BlockingPool(std::size_t max_threads, std::chrono::milliseconds keep_alive,
                           std::size_t stack_size, std::string name)
    : max_threads_(max_threads), keep_alive_(keep_alive), stack_size_(stack_size), name_(std::move(name)) {}

BlockingPool::~BlockingPool() { shutdown(); }

void BlockingPool::spawn(TaskHeader* t) {
  std::vector<pthread_t> to_join;
  {
    std::unique_lock lk(mu_);
    if (shutdown_) {
      lk.unlock();
      t->vtable->shutdown(t);
      return;
    }
    queue_.push_back(t);
    reap_exited_locked(to_join);
    if (num_idle_ > pending_wakeups_) {
      ++pending_wakeups_;
      cv_.notify_one();
    } else if (threads_.size() < max_threads_) {
      threads_.emplace_back();
      Thread* th = &threads_.back();
      pthread_attr_t attr;
      pthread_attr_init(&attr);
      pthread_attr_setstacksize(&attr, stack_size_);
      auto* arg = new StartArg{this, th};
      int rc = pthread_create(&th->handle, &attr, &BlockingPool::thread_main, arg);
      pthread_attr_destroy(&attr);
      if (rc != 0) {
        delete arg;
        threads_.pop_back();
        // The task stays queued: a running thread will pick it up. With no thread at all,
        // nothing can run it, which is an environment failure worth surfacing.
        if (threads_.empty()) throw std::runtime_error("cannot start a blocking-pool thread");
      } else {
        pthread_setname_np(th->handle, name_.substr(0, 15).c_str());
      }
    }
    // Otherwise every thread is busy and the pool is at its cap: the task waits its turn.
  }
  for (pthread_t h : to_join) pthread_join(h, nullptr);
}

void* BlockingPool::thread_main(void* raw) {
  auto* arg = static_cast<StartArg*>(raw);
  BlockingPool* pool = arg->pool;
  auto* th = static_cast<Thread*>(arg->thread);
  delete arg;
  pool->run(th);
  return nullptr;
}

void BlockingPool::run(Thread* self) {
  std::unique_lock lk(mu_);
  for (;;) {
    while (!queue_.empty()) {
      TaskHeader* t = queue_.front();
      queue_.pop_front();
      lk.unlock();
      t->vtable->poll(t);
      lk.lock();
    }
    if (shutdown_) break;
    ++num_idle_;
    bool woke = cv_.wait_for(lk, keep_alive_, [&] { return pending_wakeups_ > 0 || shutdown_; });
    --num_idle_;
    if (pending_wakeups_ > 0) --pending_wakeups_;
    if (!woke && queue_.empty()) break;  // idle for keep_alive: shrink
  }
  self->exited = true;
  cv_.notify_all();  // shutdown() may wait for the last thread
}

void BlockingPool::reap_exited_locked(std::vector<pthread_t>& to_join) {
  for (auto it = threads_.begin(); it != threads_.end();) {
    if (it->exited) {
      to_join.push_back(it->handle);
      it = threads_.erase(it);
    } else {
      ++it;
    }
  }
}

void BlockingPool::shutdown() {
  std::deque<TaskHeader*> dropped;
  std::vector<pthread_t> to_join;
  {
    std::lock_guard lk(mu_);
    if (shutdown_ && threads_.empty()) return;
    shutdown_ = true;
    dropped.swap(queue_);
    for (auto& th : threads_) to_join.push_back(th.handle);
    cv_.notify_all();
  }
  for (TaskHeader* t : dropped) t->vtable->shutdown(t);
  for (pthread_t h : to_join) pthread_join(h, nullptr);
  // Only now are the threads done touching their Thread records.
  std::lock_guard lk(mu_);
  threads_.clear();
}

std::size_t BlockingPool::num_threads() const {
  std::lock_guard lk(mu_);
  return static_cast<std::size_t>(std::count_if(threads_.begin(), threads_.end(),
                                                [](const Thread& t) { return !t.exited; }));
}
std::size_t BlockingPool::num_idle() const {
  std::lock_guard lk(mu_);
  return num_idle_;
}
std::size_t BlockingPool::queue_depth() const {
  std::lock_guard lk(mu_);
  return queue_.size();
}

}  // namespace sg::exec
