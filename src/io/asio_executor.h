// AsioExecutor: stealgate's executor as an Asio executor, so Asio idioms run on our
// workers: asio::post/dispatch/defer(ex, f), asio::co_spawn(ex, awaitable), bind_executor,
// and I/O objects constructed from it. Each submitted function becomes a closure task.
//
// Members follow the minimum Asio 1.22 executor surface (TOOLCHAIN.md §5.1): execute()
// (also for lvalues), equality, blocking.never (post/co_spawn require it) and the
// execution context, which must be the reactor's io_context so that I/O objects built on
// this executor register with our reactor instead of spawning Asio's private one.
#pragma once

#include <asio/execution.hpp>
#include <asio/io_context.hpp>

#include <type_traits>
#include <utility>

#include "exec/runtime.h"

namespace sg::io {

class AsioExecutor {
 public:
  AsioExecutor(exec::Handle h, asio::io_context& ctx) noexcept : h_(h), ctx_(&ctx) {}
  AsioExecutor(const AsioExecutor&) noexcept = default;
  AsioExecutor& operator=(const AsioExecutor&) noexcept = default;
  ~AsioExecutor() noexcept = default;

  template <class F>
  void execute(F&& f) const {
    h_.spawn_detached(std::decay_t<F>(std::forward<F>(f)));
  }

  asio::execution_context& query(asio::execution::context_t) const noexcept { return *ctx_; }
  static constexpr asio::execution::blocking_t query(asio::execution::blocking_t) noexcept {
    return asio::execution::blocking.never;
  }

  exec::Handle handle() const noexcept { return h_; }

  friend bool operator==(const AsioExecutor& a, const AsioExecutor& b) noexcept {
    return a.h_ == b.h_ && a.ctx_ == b.ctx_;
  }
  friend bool operator!=(const AsioExecutor& a, const AsioExecutor& b) noexcept { return !(a == b); }

 private:
  exec::Handle h_;
  asio::io_context* ctx_;
};

static_assert(asio::execution::is_executor<AsioExecutor>::value);

}  // namespace sg::io
