// The per-worker idle pool of upstream connections (upstream/conn_pool.h), on a real
// runtime and socket pairs: a released connection comes back on its worker, or on another
// worker whose task needs one; one the upstream closed is never handed out when it must be
// checked, and reap() lets it go; an expired one is dropped; the idle bound holds.
#include "upstream/conn_pool.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "io/runtime.h"

namespace sg::upstream {
namespace {

using namespace std::chrono_literals;

struct Pair {
  io::Stream stream;
  int peer = -1;
};

Pair make_pair(io::Runtime& rt) {
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  auto s = io::Socket::adopt(rt.context(), sv[0]);
  return Pair{io::Stream(io::TcpStream(std::move(s))), sv[1]};
}

exec::RuntimeConfig workers(std::size_t n) {
  exec::RuntimeConfig c;
  c.worker_threads = n;
  return c;
}

TEST(ConnPool, AReleasedConnectionComesBackOnItsWorker) {
  io::Runtime rt(workers(1));
  ConnPool pool(PoolOptions{8, 60s, 1});
  Pair p = make_pair(rt);
  const int fd = p.stream.tcp().native_handle();
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    pool.release(std::move(p.stream));
    if (pool.idle() != 1) co_return "not pooled";
    std::optional<io::Stream> got = pool.acquire(/*replayable=*/false);
    if (!got) co_return "not handed back";
    if (got->tcp().native_handle() != fd) co_return "another connection";
    co_return pool.acquire(false) ? "handed out twice" : "ok";
  });
  EXPECT_EQ(h.wait(), "ok");
  ::close(p.peer);
}

TEST(ConnPool, AConnectionTheUpstreamClosedIsNeverCheckedOut) {
  io::Runtime rt(workers(1));
  ConnPool pool(PoolOptions{8, 60s, 1});
  Pair p = make_pair(rt);
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    pool.release(std::move(p.stream));
    ::close(p.peer);  // the upstream closes it while it idles
    if (pool.acquire(/*replayable=*/false)) co_return "a closed connection was handed out";
    co_return pool.stale() == 1 ? "ok" : "not counted as stale";
  });
  EXPECT_EQ(h.wait(), "ok");
}

TEST(ConnPool, UnsolicitedBytesMakeAConnectionStale) {
  io::Runtime rt(workers(1));
  ConnPool pool(PoolOptions{8, 60s, 1});
  Pair p = make_pair(rt);
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    pool.release(std::move(p.stream));
    // An upstream's 408 before closing would otherwise pass for the next response.
    (void)::send(p.peer, "HTTP/1.1 408 x\r\n\r\n", 18, 0);
    co_return pool.acquire(false) ? "handed out with bytes waiting" : "ok";
  });
  EXPECT_EQ(h.wait(), "ok");
  ::close(p.peer);
}

TEST(ConnPool, ReapLetsGoOfClosedAndExpiredConnections) {
  io::Runtime rt(workers(1));
  ConnPool pool(PoolOptions{8, 50ms, 1});
  Pair closed = make_pair(rt), live = make_pair(rt);
  auto h = rt.spawn([&]() -> exec::Task<std::string> {
    pool.release(std::move(closed.stream));
    pool.release(std::move(live.stream));
    ::close(closed.peer);
    if (pool.reap() != 1) co_return "the closed one was not reaped";
    if (pool.reaped_stale() != 1 || pool.idle() != 1) co_return "wrong counts after the first reap";
    co_await exec::sleep_for(80ms);
    if (pool.reap() != 1 || pool.idle() != 0) co_return "the expired one was not reaped";
    co_return "ok";
  });
  EXPECT_EQ(h.wait(), "ok");
  ::close(live.peer);
}

TEST(ConnPool, KeepsAtMostMaxIdle) {
  io::Runtime rt(workers(1));
  ConnPool pool(PoolOptions{2, 60s, 1});
  std::vector<Pair> pairs;
  for (int i = 0; i < 3; ++i) pairs.push_back(make_pair(rt));
  auto h = rt.spawn([&]() -> exec::Task<std::size_t> {
    for (auto& p : pairs) pool.release(std::move(p.stream));
    co_return pool.idle();
  });
  EXPECT_EQ(h.wait(), 2u);
  for (auto& p : pairs) ::close(p.peer);
}

TEST(ConnPool, AConnectionReleasedOnOneWorkerIsReusedOnAnother) {
  // A keep-alive client's task moved to another worker between two requests: its next
  // request reuses the upstream connection rather than connecting a second one.
  io::Runtime rt(workers(2));
  ConnPool pool(PoolOptions{8, 60s, 2});
  Pair p = make_pair(rt);
  const int fd = p.stream.tcp().native_handle();
  auto released = rt.handle().spawn_pinned(0, [&]() -> exec::Task<std::size_t> {
    pool.release(std::move(p.stream));
    co_return pool.idle();
  });
  EXPECT_EQ(released.wait(), 1u);
  auto taken = rt.handle().spawn_pinned(1, [&]() -> exec::Task<int> {
    std::optional<io::Stream> got = pool.acquire(/*replayable=*/false);
    co_return got ? got->tcp().native_handle() : -1;
  });
  EXPECT_EQ(taken.wait(), fd);
  EXPECT_EQ(pool.idle(), 0u);
  ::close(p.peer);
}

TEST(ConnPool, WhatAFullWorkerCannotKeepGoesToAnotherUpToMaxIdle) {
  io::Runtime rt(workers(2));
  ConnPool pool(PoolOptions{4, 60s, 2});  // two per worker, four in all
  std::vector<Pair> pairs;
  for (int i = 0; i < 5; ++i) pairs.push_back(make_pair(rt));
  // Worker 0 gets all five back (their tasks were stolen from worker 1, say): it keeps two,
  // worker 1's list takes two more (the bound of four in all), and the fifth is closed.
  auto released = rt.handle().spawn_pinned(0, [&]() -> exec::Task<std::size_t> {
    for (auto& p : pairs) pool.release(std::move(p.stream));
    co_return pool.idle();
  });
  EXPECT_EQ(released.wait(), 4u);
  char c;
  EXPECT_EQ(::recv(pairs[4].peer, &c, 1, 0), 0) << "the fifth was not closed";
  EXPECT_EQ(::recv(pairs[3].peer, &c, 1, MSG_DONTWAIT), -1) << "a kept one was closed";
  // Worker 1 takes its own two, then worker 0's, before it would connect.
  auto taken = rt.handle().spawn_pinned(1, [&]() -> exec::Task<int> {
    int n = 0;
    while (pool.acquire(false)) ++n;
    co_return n;
  });
  EXPECT_EQ(taken.wait(), 4);
  EXPECT_EQ(pool.idle(), 0u);
  for (auto& p : pairs) ::close(p.peer);
}

TEST(ConnPool, ConcurrentTasksNeverShareAConnection) {
  // Tasks that move between two workers take and give back 16 connections at once (the
  // pool's locks under ThreadSanitizer in the concurrency suite): none is ever handed to
  // two tasks at a time, none is lost, and every one is back at the end.
  io::Runtime rt(workers(2));
  constexpr int kConns = 16, kTasks = 8, kRounds = 300;
  ConnPool pool(PoolOptions{kConns, 60s, 2});
  std::vector<Pair> pairs;
  for (int i = 0; i < kConns; ++i) pairs.push_back(make_pair(rt));
  std::map<int, std::atomic<bool>> in_use;
  for (auto& p : pairs) in_use[p.stream.tcp().native_handle()] = false;
  rt.spawn([&]() -> exec::Task<void> {
    for (auto& p : pairs) pool.release(std::move(p.stream));
    co_return;
  }).wait();
  ASSERT_EQ(pool.idle(), static_cast<std::size_t>(kConns));
  std::atomic<int> shared{0}, taken{0};
  std::vector<exec::JoinHandle<void>> tasks;
  for (int t = 0; t < kTasks; ++t) {
    tasks.push_back(rt.spawn([&]() -> exec::Task<void> {
      for (int r = 0; r < kRounds; ++r) {
        std::optional<io::Stream> got = pool.acquire(/*replayable=*/true);
        if (got) {
          taken.fetch_add(1);
          std::atomic<bool>& flag = in_use.at(got->tcp().native_handle());
          if (flag.exchange(true)) shared.fetch_add(1);
          co_await exec::yield_now();  // held across a suspension: the task may move
          flag.store(false);
          pool.release(std::move(*got));
        }
        co_await exec::yield_now();
      }
    }));
  }
  for (auto& h : tasks) h.wait();
  EXPECT_EQ(shared.load(), 0) << "a connection was handed to two tasks at once";
  EXPECT_GT(taken.load(), kTasks * kRounds / 2);
  EXPECT_EQ(pool.idle(), static_cast<std::size_t>(kConns)) << "connections were lost or closed";
  for (auto& p : pairs) ::close(p.peer);
}

TEST(ConnPool, OffTheWorkersNothingIsPooled) {
  io::Runtime rt(workers(1));
  ConnPool pool(PoolOptions{8, 60s, 1});
  Pair p = make_pair(rt);
  pool.release(std::move(p.stream));  // this thread is no worker: closed, not pooled
  EXPECT_EQ(pool.idle(), 0u);
  EXPECT_FALSE(pool.acquire(false).has_value());
  char c;
  EXPECT_EQ(::recv(p.peer, &c, 1, 0), 0) << "the connection was not closed";
  ::close(p.peer);
}

}  // namespace
}  // namespace sg::upstream
