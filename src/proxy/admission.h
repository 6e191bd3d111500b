// The admission phase: a request takes a permit of the global, its route's and its
// cluster's semaphore (where configured), waiting in each one's bounded queue up to
// limits.queue_timeout while watching its client; a full queue, a timeout or shedding
// refuses it (the caller answers 503), and a client that leaves while queued is dropped.
// No upstream is touched before every permit is held.
#pragma once

#include <span>
#include <string>

#include "exec/coro.h"
#include "exec/semaphore.h"
#include "io/stream.h"
#include "proxy/gateway.h"

namespace sg::proxy {

inline constexpr std::size_t kAdmissionLevels = 3;  // global, route, cluster

struct Admission {
  enum Outcome { kAdmitted, kRefused, kClientGone };
  Outcome outcome = kAdmitted;
  std::string note;  // why it was refused, for the access log
};

// The common case without a coroutine frame: every level has a free permit (or no limit).
// Fills `permits` and returns true; otherwise takes nothing and admit_request must wait.
bool admit_at_once(Gateway& gw, const Snapshot& snap, const routing::CompiledRoute& route,
                   std::span<exec::Semaphore::Permit, kAdmissionLevels> permits);
// Fills `permits` (one per level, empty where a level has no limit) or refuses. Counts
// rejections and queue waits (AdmissionStats) and feeds the load shedder.
exec::Task<Admission> admit_request(Gateway& gw, const Snapshot& snap, const routing::CompiledRoute& route,
                                    io::Stream& client, std::span<exec::Semaphore::Permit, kAdmissionLevels> permits);

}  // namespace sg::proxy
