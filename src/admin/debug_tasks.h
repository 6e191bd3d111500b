// GET /debug/tasks: the scheduler as JSON, for people and for the /debug/scheduler page.
//   workers      per worker: busy share since the previous look (at least a second
//                back), queue depth, polls, steals, parks, overflows, long polls, ...
//   poll_time, scheduling_delay   histograms of all workers (log2 buckets)
//   tasks        live tasks (with runtime.task_diagnostics), busiest first, at most
//                `limit` (query ?limit=N, default 200): kind, name, state, polls, busy,
//                queued and idle time, longest poll, wakes by source, last worker
//   slow_polls   the slowest polls of the last 10-20 s per worker, slowest first
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace sg::io {
class Runtime;
}

namespace sg::admin {

inline constexpr std::size_t kDefaultTaskLimit = 200;
inline constexpr std::size_t kMaxTaskLimit = 10000;

std::string debug_tasks_json(io::Runtime& rt, std::size_t limit);

// The `limit` of a /debug/tasks query string ("limit=50"); the default when absent or
// not a number, clamped to [1, kMaxTaskLimit].
std::size_t task_limit_of(std::string_view query);

}  // namespace sg::admin
