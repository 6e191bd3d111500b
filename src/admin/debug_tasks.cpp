#include "admin/debug_tasks.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "exec/runtime.h"
#include "exec/worker.h"
#include "io/runtime.h"

namespace sg::admin {

namespace {

constexpr uint64_t kShareWindowNs = 1'000'000'000;

// Busy share per worker between the previous look at least a second back and now, so a
// page refreshing every second sees each second's load.
class BusyShares {
 public:
  // Returns a share per worker, or an empty vector before there is a window.
  std::vector<double> update(const void* runtime, uint64_t now, const std::vector<uint64_t>& busy) {
    std::lock_guard lk(mu_);
    if (runtime != runtime_ || busy.size() != last_.busy.size()) {
      runtime_ = runtime;
      prev_ = {};
      last_ = {now, busy};
      return {};
    }
    if (now - last_.at >= kShareWindowNs) {
      prev_ = last_;
      last_ = {now, busy};
    }
    const Sample& base = prev_.busy.empty() ? last_ : prev_;
    if (now <= base.at) return {};
    std::vector<double> out;
    for (std::size_t w = 0; w < busy.size(); ++w) {
      const uint64_t d = busy[w] > base.busy[w] ? busy[w] - base.busy[w] : 0;
      out.push_back(std::min(1.0, static_cast<double>(d) / static_cast<double>(now - base.at)));
    }
    return out;
  }

 private:
  struct Sample {
    uint64_t at = 0;
    std::vector<uint64_t> busy;
  };
  std::mutex mu_;
  const void* runtime_ = nullptr;
  Sample prev_, last_;
};

BusyShares& busy_shares() {
  static BusyShares s;
  return s;
}

class Json {
 public:
  Json& raw(std::string_view s) {
    comma();
    out_ += s;
    return *this;
  }
  Json& key(std::string_view k) {
    comma();
    out_ += '"';
    out_ += k;
    out_ += "\":";
    fresh_ = true;
    return *this;
  }
  Json& num(double v) {
    comma();
    char buf[32];
    int n = std::snprintf(buf, sizeof buf, "%.9g", v);
    out_.append(buf, static_cast<std::size_t>(n));
    return *this;
  }
  Json& num(uint64_t v) {
    comma();
    out_ += std::to_string(v);
    return *this;
  }
  Json& str(std::string_view s) {
    comma();
    out_ += log::json_quote(s);
    return *this;
  }
  Json& null() {
    comma();
    out_ += "null";
    return *this;
  }
  Json& open(char c) {
    comma();
    out_ += c;
    fresh_ = true;
    return *this;
  }
  Json& close(char c) {
    out_ += c;
    fresh_ = false;
    return *this;
  }
  std::string take() { return std::move(out_); }

 private:
  void comma() {
    if (!fresh_) out_ += ',';
    fresh_ = false;
  }
  std::string out_;
  bool fresh_ = true;
};

double seconds(uint64_t ns) { return static_cast<double>(ns) * 1e-9; }

void histogram(Json& j, std::string_view name, const exec::DelayHistogram& h) {
  j.key(name).open('{');
  j.key("le_seconds").open('[');
  for (std::size_t i = 0; i + 1 < exec::kDelayBuckets; ++i) j.num(exec::DelayHistogram::upper_bound_seconds(i));
  j.close(']');
  j.key("counts").open('[');
  for (uint64_t c : h.buckets) j.num(c);
  j.close(']');
  j.key("count").num(h.count).key("sum_seconds").num(seconds(h.sum_ns));
  j.close('}');
}

void workers(Json& j, const exec::RuntimeStats& st, const std::vector<double>& shares) {
  j.key("workers").open('[');
  for (std::size_t w = 0; w < st.workers.size(); ++w) {
    const exec::WorkerCounters& c = st.workers[w];
    j.open('{').key("worker").num(uint64_t{w});
    j.key("busy_share");
    if (w < shares.size()) j.num(shares[w]);
    else j.null();
    j.key("busy_seconds").num(seconds(c.busy_ns));
    j.key("local_queue_depth").num(c.local_queue_depth);
    j.key("polls").num(c.polls).key("steals").num(c.steals).key("steal_operations").num(c.steal_operations);
    j.key("parks").num(c.parks).key("overflows").num(c.overflows).key("lifo_hits").num(c.lifo_hits);
    j.key("injected_polls").num(c.remote_polled).key("forced_yields").num(c.forced_yields);
    j.key("driver_polls").num(c.driver_polls).key("long_polls").num(c.long_polls);
    j.key("memory_reclaims").num(c.memory_reclaims).key("memory_reclaimed_bytes").num(c.memory_reclaimed_bytes);
    j.close('}');
  }
  j.close(']');
}

void task(Json& j, const exec::TaskInfo& t) {
  j.open('{').key("id").num(t.id).key("kind").str(exec::task_kind_name(t.kind)).key("name").str(t.name);
  j.key("state").str(exec::task_state_name(t.state)).key("polls").num(t.polls);
  j.key("busy_seconds").num(seconds(t.busy_ns)).key("scheduled_seconds").num(seconds(t.scheduled_ns));
  j.key("idle_seconds").num(seconds(t.idle_ns)).key("max_poll_seconds").num(seconds(t.max_poll_ns));
  j.key("age_seconds").num(seconds(t.age_ns));
  j.key("wakes").open('{');
  for (std::size_t s = 0; s < exec::kWakeSources; ++s) {
    j.key(exec::wake_source_name(static_cast<exec::WakeSource>(s))).num(t.wakes[s]);
  }
  j.close('}');
  j.key("last_worker");
  if (t.last_worker == exec::kNoWorker) j.null();
  else j.num(uint64_t{t.last_worker});
  j.close('}');
}

void tasks(Json& j, const exec::Scheduler& s, uint64_t now, std::size_t limit) {
  std::vector<exec::TaskInfo> all = s.tasks().snapshot(now);
  std::array<uint64_t, exec::kTaskKinds> by_kind{};
  for (const auto& t : all) ++by_kind[static_cast<std::size_t>(t.kind)];
  const std::size_t shown = std::min(limit, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(shown), all.end(),
                    [](const exec::TaskInfo& a, const exec::TaskInfo& b) { return a.busy_ns > b.busy_ns; });
  j.key("tasks_total").num(uint64_t{all.size()}).key("tasks_listed").num(uint64_t{shown});
  j.key("tasks_by_kind").open('{');
  for (std::size_t k = 0; k < exec::kTaskKinds; ++k) {
    j.key(exec::task_kind_name(static_cast<exec::TaskKind>(k))).num(by_kind[k]);
  }
  j.close('}');
  j.key("tasks").open('[');
  for (std::size_t i = 0; i < shown; ++i) task(j, all[i]);
  j.close(']');
}

void slow_polls(Json& j, const exec::Scheduler& s, uint64_t now) {
  j.key("slow_polls").open('[');
  for (const auto& p : s.slow_polls()) {
    j.open('{').key("seconds").num(seconds(p.duration_ns)).key("worker").num(uint64_t{p.worker});
    j.key("kind").str(exec::task_kind_name(p.kind)).key("name").str(p.name);
    j.key("task");
    if (p.task_id != 0) j.num(p.task_id);
    else j.null();
    j.key("ago_seconds").num(seconds(now > p.ended_ns ? now - p.ended_ns : 0));
    j.close('}');
  }
  j.close(']');
}

}  // namespace

std::size_t task_limit_of(std::string_view query) {
  std::size_t limit = kDefaultTaskLimit;
  while (!query.empty()) {
    std::size_t amp = query.find('&');
    std::string_view part = query.substr(0, amp);
    if (part.starts_with("limit=")) {
      std::string_view v = part.substr(6);
      std::size_t n = 0;
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec == std::errc{} && p == v.data() + v.size()) limit = std::clamp<std::size_t>(n, 1, kMaxTaskLimit);
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return limit;
}

std::string debug_tasks_json(io::Runtime& rt, std::size_t limit) {
  const exec::Scheduler& s = *rt.exec().handle().scheduler();
  const exec::RuntimeStats st = rt.exec().stats();
  const uint64_t now = exec::now_ns();
  std::vector<uint64_t> busy;
  for (const auto& w : st.workers) busy.push_back(w.busy_ns);
  const std::vector<double> shares = busy_shares().update(&s, now, busy);

  Json j;
  j.open('{');
  j.key("io_driver").str(io::io_driver_name(rt.driver_kind()));
  j.key("task_diagnostics").raw(s.config().task_diagnostics ? "true" : "false");
  j.key("long_poll_threshold_seconds").num(seconds(static_cast<uint64_t>(s.config().long_poll_threshold.count())));
  workers(j, st, shares);
  j.key("injection_queue_depth").num(st.injection_queue_depth).key("remote_schedules").num(st.remote_schedules);
  j.key("blocking_threads").num(st.blocking_threads);
  const exec::WorkerCounters tot = st.total();
  histogram(j, "poll_time", tot.poll_time);
  histogram(j, "scheduling_delay", tot.sched_delay);
  tasks(j, s, now, limit);
  slow_polls(j, s, now);
  j.close('}');
  return j.take();
}

}  // namespace sg::admin
