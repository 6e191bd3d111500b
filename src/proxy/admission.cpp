#include "proxy/admission.h"

#include <array>

#include "exec/fast_rand.h"
#include "io/wait.h"

namespace sg::proxy {

namespace {

// Waits in an admission queue while watching the client: a client that disconnects while
// queued leaves the queue (its wait ends as a timeout that the caller recognises).
class QueueWait final : public exec::WaitTimeout {
 public:
  QueueWait(io::Deadline dl, io::Stream& client) : dl_(dl), client_(client) {}
  void arm(exec::Waker w) override {
    io::arm_deadline(timer_, dl_, w.clone());
    client_wait_.start(client_.tcp().socket(), io::Interest::kRead, std::move(w), io::kTagReady,
                       io::WaitRole::kWatch);
  }
  void cancel() override {
    timer_.cancel();
    client_wait_.cancel();
  }

 private:
  io::Deadline dl_;
  exec::TimerEntry timer_;
  io::ReadyWait client_wait_;
  io::Stream& client_;
};

// A queue wait ends between 80% and 100% of queue_timeout, drawn per request. Requests
// that queued together (a burst, or closed-loop clients that were refused together and
// came straight back) would otherwise all time out in the same instant and return as one
// wave again; the spread dissolves such waves within a few cycles.
io::Clock::duration jittered_queue_timeout(io::Clock::duration timeout) {
  thread_local exec::FastRand rand(static_cast<uint32_t>(io::Clock::now().time_since_epoch().count()));
  // Drawn in microseconds: a fifth of any sane timeout fits in 32 bits (up to ~71 min).
  const auto spread = std::chrono::duration_cast<std::chrono::microseconds>(timeout) / 5;
  if (spread.count() <= 0 || spread.count() > UINT32_MAX) return timeout;
  return timeout - std::chrono::microseconds(rand.below(static_cast<uint32_t>(spread.count())));
}

enum class Admit { kAdmitted, kQueueFull, kDisplaced, kTimeout, kShed, kClientGone };

// Takes a permit from `sem` (if any), waiting in its queue until `queue_timeout`; while
// `shedding`, refuses instead of waiting (see proxy/load_shedder.h).
exec::Task<Admit> admit(exec::Semaphore* sem, exec::Semaphore::Permit& permit,
                        io::Stream& client, io::Clock::duration queue_timeout, bool shedding,
                        AdmissionStats& st) {
  if (sem == nullptr) co_return Admit::kAdmitted;
  if (sem->try_acquire()) {
    permit = exec::Semaphore::Permit(sem);
    co_return Admit::kAdmitted;
  }
  if (shedding) co_return Admit::kShed;
  auto t0 = exec::tick_now();
  io::Deadline dl{t0 + jittered_queue_timeout(queue_timeout)};
  bool watch_client = true;
  st.queued.fetch_add(1, std::memory_order_relaxed);
  Admit out = Admit::kTimeout;
  for (;;) {
    exec::AcquireStatus s;
    if (watch_client) {
      QueueWait w(dl, client);
      s = co_await sem->acquire(&w);
    } else {
      io::DeadlineTimeout w(dl);
      s = co_await sem->acquire(&w);
    }
    if (s == exec::AcquireStatus::kAcquired) {
      permit = exec::Semaphore::Permit(sem);
      out = Admit::kAdmitted;
      break;
    }
    if (s == exec::AcquireStatus::kQueueFull || s == exec::AcquireStatus::kDisplaced) {
      out = s == exec::AcquireStatus::kQueueFull ? Admit::kQueueFull : Admit::kDisplaced;
      break;
    }
    if (dl.expired()) break;  // queue timeout
    // Woken early. A receive that found no free buffer brought nothing
    // (io::Stream::woke_with_input): watch on. Otherwise the client closed, or sent more
    // bytes (pipelining): keep waiting, no longer watching (they would wake us at once).
    if (!client.woke_with_input()) continue;
    if (client.peer_closed()) {
      out = Admit::kClientGone;
      break;
    }
    watch_client = false;
  }
  st.queued.fetch_sub(1, std::memory_order_relaxed);
  const auto waited = std::chrono::duration_cast<std::chrono::nanoseconds>(exec::tick_now() - t0);
  st.wait.observe(static_cast<uint64_t>(waited.count()));
  co_return out;
}

}  // namespace

namespace {

struct Level {
  exec::Semaphore* sem;  // null: no limit at this level
  Scope scope;
};

std::array<Level, kAdmissionLevels> levels_of(const Snapshot& snap, const routing::CompiledRoute& route) {
  auto cl_it = snap.cluster_limits.find(route.cluster->name());
  return {{
      {snap.global_limit.get(), Scope::kGlobal},
      {snap.route_limits[route.index].get(), Scope::kRoute},
      {cl_it == snap.cluster_limits.end() ? nullptr : cl_it->second.get(), Scope::kCluster},
  }};
}

}  // namespace

bool admit_at_once(Gateway& gw, const Snapshot& snap, const routing::CompiledRoute& route,
                   std::span<exec::Semaphore::Permit, kAdmissionLevels> permits) {
  bool limited = false;
  const auto levels = levels_of(snap, route);
  for (std::size_t i = 0; i < kAdmissionLevels; ++i) {
    exec::Semaphore* sem = levels[i].sem;
    if (sem == nullptr) continue;
    limited = true;
    if (!sem->try_acquire()) {
      for (auto& p : permits) p.reset();  // admit_request starts over, in order
      return false;
    }
    permits[i] = exec::Semaphore::Permit(sem);
  }
  if (limited) {
    const auto now = exec::tick_now();
    gw.shedder().sojourn.observe(exec::Clock::duration::zero(), now);  // no queue sojourn
  }
  return true;
}

exec::Task<Admission> admit_request(Gateway& gw, const Snapshot& snap, const routing::CompiledRoute& route,
                                    io::Stream& client, std::span<exec::Semaphore::Permit, kAdmissionLevels> permits) {
  const auto& lim = snap.config->limits;
  AdmissionStats& ast = gw.stats().admission;
  const auto levels = levels_of(snap, route);
  LoadShedder& shedder = gw.shedder();
  const bool shedding = shedder.shedding();
  const auto admission_start = exec::tick_now();
  bool limited = false;
  for (std::size_t i = 0; i < kAdmissionLevels; ++i) {
    const Level& lv = levels[i];
    limited = limited || lv.sem != nullptr;
    Admit a = co_await admit(lv.sem, permits[i], client, lim.queue_timeout, shedding, ast);
    if (a == Admit::kAdmitted) continue;
    if (a == Admit::kClientGone) co_return Admission{Admission::kClientGone, "client closed while queued"};
    RejectReason why = a == Admit::kQueueFull || a == Admit::kDisplaced ? RejectReason::kQueueFull
                       : a == Admit::kShed    ? RejectReason::kShed
                                              : RejectReason::kQueueTimeout;
    if (why == RejectReason::kShed) shedder.note_refused(exec::tick_now());
    ast.reject(lv.scope, why);
    co_return Admission{Admission::kRefused,
                        a == Admit::kDisplaced               ? "pushed out of a full admission queue by a newer request"
                        : why == RejectReason::kQueueFull ? "admission queue full"
                        : why == RejectReason::kShed      ? "shed (standing admission queue or scheduling delay)"
                                                          : "admission queue timeout"};
  }
  if (limited) {
    // The admitted request's queue sojourn (0 when every permit was free) drives the
    // shedder's standing-queue detector.
    auto now = exec::tick_now();
    shedder.sojourn.observe(now - admission_start, now);
  }
  co_return Admission{};
}

}  // namespace sg::proxy
