// The executor as an Asio executor: post/dispatch/defer and co_spawn with Asio's own
// awaitables and timers run their code on stealgate's workers.
#include "io/asio_executor.h"

#include <asio/co_spawn.hpp>
#include <asio/defer.hpp>
#include <asio/detached.hpp>
#include <asio/dispatch.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>

#include "exec/context.h"
#include "io/runtime.h"

namespace sg::io {
namespace {

using namespace std::chrono_literals;

bool on_worker_thread() { return exec::tl_ctx.worker != nullptr; }

TEST(AsioExecutor, PostDispatchDeferRunOnWorkers) {
  exec::RuntimeConfig cfg;
  cfg.worker_threads = 2;
  Runtime rt(cfg);
  AsioExecutor ex(rt.handle(), rt.asio_context());
  std::promise<bool> p1, p2, p3;
  asio::post(ex, [&] { p1.set_value(on_worker_thread()); });
  asio::dispatch(ex, [&] { p2.set_value(on_worker_thread()); });
  asio::defer(ex, [&] { p3.set_value(on_worker_thread()); });
  EXPECT_TRUE(p1.get_future().get());
  EXPECT_TRUE(p2.get_future().get());
  EXPECT_TRUE(p3.get_future().get());
}

TEST(AsioExecutor, CoSpawnAwaitableWithTimerResumesOnWorkers) {
  exec::RuntimeConfig cfg;
  cfg.worker_threads = 2;
  Runtime rt(cfg);
  AsioExecutor ex(rt.handle(), rt.asio_context());
  std::promise<int> done;
  asio::co_spawn(
      ex,
      [&]() -> asio::awaitable<int, AsioExecutor> {
        int ok = on_worker_thread() ? 1 : 0;
        asio::basic_waitable_timer<std::chrono::steady_clock, asio::wait_traits<std::chrono::steady_clock>,
                                   AsioExecutor>
            t(ex, 20ms);
        co_await t.async_wait(asio::use_awaitable_t<AsioExecutor>{});
        ok += on_worker_thread() ? 1 : 0;
        co_return ok;
      },
      [&](std::exception_ptr e, int v) { done.set_value(e ? -1 : v); });
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(f.get(), 2);
}

}  // namespace
}  // namespace sg::io
