#include "metrics/exporter.h"

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <optional>
#include <sstream>

#include "common/log.h"
#include "exec/alloc.h"
#include "metrics/families.h"
#include "metrics/process_stats.h"
#include "stealgate_version.h"

namespace sg::metrics {

namespace {

using namespace detail;  // Families, Labels, Snap, add_histogram (metrics/families.h)

// A log2 duration histogram (exec::DelayHistogram) as a Prometheus histogram.
void add_duration_histogram(MetricFamily& f, Labels labels, const exec::DelayHistogram& h) {
  ClientMetric m;
  m.label = std::move(labels);
  uint64_t cum = 0;
  for (std::size_t i = 0; i < exec::kDelayBuckets; ++i) {
    cum += h.buckets[i];
    m.histogram.bucket.push_back({cum, exec::DelayHistogram::upper_bound_seconds(i)});
  }
  m.histogram.sample_count = cum;
  m.histogram.sample_sum = static_cast<double>(h.sum_ns) * 1e-9;
  f.metric.push_back(std::move(m));
}

// The per-worker counters and gauges, each a family labelled by worker.
struct WorkerField {
  const char* name;
  const char* help;
  uint64_t exec::WorkerCounters::*member;
  bool counter;
  double scale;
};
const WorkerField kWorkerFields[] = {
    {"stealgate_executor_polls_total", "Task polls per worker.", &exec::WorkerCounters::polls, true, 1},
    {"stealgate_executor_local_schedules_total", "Tasks scheduled by a worker onto itself.",
     &exec::WorkerCounters::local_schedules, true, 1},
    {"stealgate_executor_injected_polls_total", "Tasks a worker took from the injection queue.",
     &exec::WorkerCounters::remote_polled, true, 1},
    {"stealgate_executor_steals_total", "Tasks stolen from other workers.", &exec::WorkerCounters::steals, true, 1},
    {"stealgate_executor_steal_operations_total", "Successful steal operations.",
     &exec::WorkerCounters::steal_operations, true, 1},
    {"stealgate_executor_overflows_total", "Times half a full local queue moved to the injection queue.",
     &exec::WorkerCounters::overflows, true, 1},
    {"stealgate_executor_lifo_hits_total", "Polls of a task taken from the LIFO slot.",
     &exec::WorkerCounters::lifo_hits, true, 1},
    {"stealgate_executor_lifo_capped_total", "Ticks where the LIFO slot hit its per-tick cap.",
     &exec::WorkerCounters::lifo_capped, true, 1},
    {"stealgate_executor_priority_schedules_total",
     "Wake-ups of admitted requests queued in the priority lane.", &exec::WorkerCounters::priority_schedules, true, 1},
    {"stealgate_executor_forced_yields_total", "Yields forced by an exhausted coop budget.",
     &exec::WorkerCounters::forced_yields, true, 1},
    {"stealgate_executor_parks_total", "Times a worker went to sleep.", &exec::WorkerCounters::parks, true, 1},
    {"stealgate_executor_unparks_total", "Times a worker woke up.", &exec::WorkerCounters::unparks, true, 1},
    {"stealgate_executor_driver_polls_total", "Polls of the I/O driver by a worker.",
     &exec::WorkerCounters::driver_polls, true, 1},
    {"stealgate_executor_overdue_driver_polls_total",
     "I/O driver polls a worker made right after a task poll of at least runtime.driver_visit_after_poll_us.",
     &exec::WorkerCounters::overdue_driver_polls, true, 1},
    {"stealgate_executor_batch_yields_total",
     "Times a worker gave up its CPU between two batches of its own ring's completions "
     "(runtime.yield_between_batches).",
     &exec::WorkerCounters::batch_yields, true, 1},
    {"stealgate_executor_long_batch_yields_total",
     "Of those, yields after which the worker waited 2 ms or more for its CPU: a CPU-bound neighbour took it for a "
     "whole time slice.",
     &exec::WorkerCounters::long_batch_yields, true, 1},
    {"stealgate_executor_busy_seconds_total", "Time a worker spent not parked.", &exec::WorkerCounters::busy_ns,
     true, 1e-9},
    {"stealgate_executor_local_queue_depth", "Tasks in a worker's local run queue.",
     &exec::WorkerCounters::local_queue_depth, false, 1},
    {"stealgate_executor_global_queue_interval", "Ticks between injection-queue checks (adaptive or fixed).",
     &exec::WorkerCounters::global_queue_interval, false, 1},
    {"stealgate_executor_long_polls_total",
     "Polls that held a worker for at least runtime.long_poll_threshold (each is logged, at most once a second "
     "per worker, with its task's kind and name).",
     &exec::WorkerCounters::long_polls, true, 1},
    {"stealgate_executor_memory_reclaims_total",
     "Times a worker idle for runtime.idle_memory_reclaim gave cached memory back.",
     &exec::WorkerCounters::memory_reclaims, true, 1},
    {"stealgate_executor_memory_reclaimed_bytes_total",
     "Bytes of cached memory (free slabs, buffers, parsers) those reclaims freed.",
     &exec::WorkerCounters::memory_reclaimed_bytes, true, 1},
};

void executor_families(Families& fs, const exec::RuntimeStats& st) {
  for (const WorkerField& f : kWorkerFields) {
    auto& fam = fs.family(f.name, f.help, f.counter ? MetricType::Counter : MetricType::Gauge);
    for (std::size_t w = 0; w < st.workers.size(); ++w) {
      Families::add(fam, {{"worker", std::to_string(w)}}, static_cast<double>(st.workers[w].*f.member) * f.scale);
    }
  }
  fs.scalar("stealgate_executor_workers", "Worker threads.", MetricType::Gauge, static_cast<double>(st.workers.size()));
  fs.scalar("stealgate_executor_injection_queue_depth", "Tasks waiting in the global injection queue.",
            MetricType::Gauge, static_cast<double>(st.injection_queue_depth));
  fs.scalar("stealgate_executor_remote_schedules_total", "Tasks scheduled from outside any worker.",
            MetricType::Counter, static_cast<double>(st.remote_schedules));
  fs.scalar("stealgate_executor_blocking_threads", "Threads of the blocking pool.", MetricType::Gauge,
            static_cast<double>(st.blocking_threads));
  fs.scalar("stealgate_executor_blocking_queue_depth", "Blocking tasks waiting for a thread.", MetricType::Gauge,
            static_cast<double>(st.blocking_queue_depth));
  auto& poll_time = fs.family("stealgate_executor_poll_duration_seconds",
                              "Time each task poll held its worker.", MetricType::Histogram);
  for (std::size_t w = 0; w < st.workers.size(); ++w) {
    add_duration_histogram(poll_time, {{"worker", std::to_string(w)}}, st.workers[w].poll_time);
  }
  // Scheduling delay (runnable -> polled), sampled, all workers together.
  add_duration_histogram(fs.family("stealgate_executor_scheduling_delay_seconds",
                                   "Time a runnable task waits in a run queue before its poll (sampled; "
                                   "LIFO-slot hand-offs do not queue and are not sampled).",
                                   MetricType::Histogram),
                         {}, st.total().sched_delay);
}

// Where the resident memory is, besides the rings' receive buffers (io_uring_families):
// the executor's task allocator, and glibc's heap.
void memory_families(Families& fs) {
  fs.scalar("stealgate_executor_task_memory_bytes",
            "Memory of the executor's task allocator: the pages its slabs have carved into tasks, coroutine "
            "frames, task records and ring operations, in use or free for reuse (idle workers give wholly free "
            "slabs back).",
            MetricType::Gauge, static_cast<double>(exec::task_memory_bytes()));
  if (const std::optional<HeapStats> heap = read_heap_stats()) {
    auto& f = fs.family("stealgate_malloc_heap_bytes",
                        "The C library's malloc heap: bytes of allocated chunks (in_use), and free bytes its arenas "
                        "keep between and after them, resident or given back (free).",
                        MetricType::Gauge);
    Families::add(f, {{"state", "in_use"}}, heap->in_use_bytes);
    Families::add(f, {{"state", "free"}}, heap->free_bytes);
  }
}

// Live tasks by kind (with runtime.task_diagnostics; absent without).
void task_families(Families& fs, const exec::Scheduler& s) {
  if (!s.config().task_diagnostics) return;
  const std::array<uint64_t, exec::kTaskKinds> by_kind = s.tasks().count_by_kind();
  auto& f = fs.family("stealgate_executor_tasks", "Live tasks by kind.", MetricType::Gauge);
  for (std::size_t k = 0; k < exec::kTaskKinds; ++k) {
    Families::add(f, {{"kind", exec::task_kind_name(static_cast<exec::TaskKind>(k))}}, static_cast<double>(by_kind[k]));
  }
}

// The io_uring rings, one series per worker (absent on epoll): operations in flight (each
// waiting socket holds one), cancels by where they came from, and the provided receive
// buffers (in use, and receives that found none free).
void io_uring_families(Families& fs, const std::vector<io::RingStats>& rings) {
  if (rings.empty()) return;
  auto& in_flight = fs.family("stealgate_executor_io_uring_ops_in_flight",
                              "Operations submitted to a worker's io_uring ring and not yet completed.",
                              MetricType::Gauge);
  auto& cancels = fs.family("stealgate_executor_io_uring_cancels_total",
                            "Operations cancelled on a worker's ring, by the thread that cancelled (own: the "
                            "ring's worker; other: queued to it by another thread).",
                            MetricType::Counter);
  auto& provided = fs.family("stealgate_executor_io_uring_receive_buffers",
                             "Receive buffers provided to a worker's ring (4 KiB each; from 32, doubled up to 1024 "
                             "once more than 1 receive in 16 has kept finding none free for a second; never "
                             "withdrawn).",
                             MetricType::Gauge);
  auto& in_use = fs.family("stealgate_executor_io_uring_receive_buffers_in_use",
                           "Provided receive buffers of a worker's ring holding received bytes not yet read.",
                           MetricType::Gauge);
  auto& shortages = fs.family("stealgate_executor_io_uring_receive_buffer_shortages_total",
                              "Receives on a worker's ring that found no free provided buffer (each then read "
                              "with a plain recv; frequent shortages grow the ring, up to 1024).",
                              MetricType::Counter);
  for (std::size_t w = 0; w < rings.size(); ++w) {
    const std::string worker = std::to_string(w);
    Families::add(in_flight, {{"worker", worker}}, static_cast<double>(rings[w].in_flight));
    Families::add(cancels, {{"worker", worker}, {"from", "own"}},
                  static_cast<double>(rings[w].cancels));
    Families::add(cancels, {{"worker", worker}, {"from", "other"}}, static_cast<double>(rings[w].remote_cancels));
    Families::add(provided, {{"worker", worker}}, static_cast<double>(rings[w].buffers_provided));
    Families::add(in_use, {{"worker", worker}}, static_cast<double>(rings[w].buffers_in_use));
    Families::add(shortages, {{"worker", worker}}, static_cast<double>(rings[w].buffer_shortages));
  }
}

// TLS listeners: handshakes by version and resumption, failures by kind, and when each
// certificate expires (for an alert well before it does).
void tls_families(Families& fs, proxy::Gateway& gw, const Snap& snap) {
  auto& ok = fs.family("stealgate_tls_handshakes_total",
                       "Completed TLS handshakes by listener, protocol version and session resumption.",
                       MetricType::Counter);
  auto& failed = fs.family("stealgate_tls_handshake_failures_total", "Failed TLS handshakes by listener and reason.",
                           MetricType::Counter);
  auto& expiry = fs.family("stealgate_tls_certificate_expiry_timestamp_seconds",
                           "When each served certificate expires (Unix time).", MetricType::Gauge);
  for (const auto& ls : gw.listener_states()) {
    const config::ListenerSection* l = snap ? snap->listener(ls->key) : nullptr;
    if (l == nullptr || !l->tls) continue;
    for (std::size_t v = 0; v < proxy::kTlsVersions.size(); ++v) {
      for (int resumed = 0; resumed < 2; ++resumed) {
        Families::add(ok, {{"listener", l->name}, {"version", std::string(proxy::kTlsVersions[v])},
                           {"resumed", resumed == 1 ? "true" : "false"}},
                      static_cast<double>(ls->stats.tls_handshakes[v][static_cast<std::size_t>(resumed)].load()));
      }
    }
    for (std::size_t k = 0; k < proxy::kTlsFailureKinds.size(); ++k) {
      Families::add(failed, {{"listener", l->name}, {"reason", std::string(proxy::kTlsFailureKinds[k])}},
                    static_cast<double>(ls->stats.tls_failures[k].load()));
    }
    if (auto tc = snap->tls_for(ls->key)) {
      for (const auto& c : tc->certificates()) {
        Families::add(expiry, {{"listener", l->name}, {"certificate", c.file}, {"subject", c.subject}},
                      static_cast<double>(c.not_after));
      }
    }
  }
}

// Client connections and request paths, by listener.
void downstream_families(Families& fs, proxy::Gateway& gw, const Snap& snap) {
  auto& conn_active =
      fs.family("stealgate_downstream_connections_active", "Open client connections.", MetricType::Gauge);
  auto& conn_total =
      fs.family("stealgate_downstream_connections_total", "Accepted client connections.", MetricType::Counter);
  auto& conn_rej = fs.family("stealgate_downstream_connections_rejected_total",
                             "Connections refused at the max_connections limit.", MetricType::Counter);
  auto& acc_err = fs.family("stealgate_downstream_accept_errors_total", "accept() failures.", MetricType::Counter);
  auto& proxy_err = fs.family("stealgate_downstream_proxy_protocol_errors_total",
                              "Connections closed for a missing, malformed or late PROXY protocol header.",
                              MetricType::Counter);
  auto& path_norm = fs.family("stealgate_http_paths_normalized_total",
                              "Request paths rewritten by normalization before routing.", MetricType::Counter);
  auto& path_rej = fs.family("stealgate_http_paths_rejected_total",
                             "Requests refused with 400 for their path or Host, by reason.", MetricType::Counter);
  for (const auto& ls : gw.listener_states()) {
    const config::ListenerSection* l = snap ? snap->listener(ls->key) : nullptr;
    Labels lb{{"listener", l != nullptr ? l->name : ls->address}};
    Families::add(conn_active, lb, static_cast<double>(ls->stats.connections_active.load()));
    Families::add(conn_total, lb, static_cast<double>(ls->stats.connections_total.load()));
    Families::add(conn_rej, lb, static_cast<double>(ls->stats.rejected_max_connections.load()));
    Families::add(acc_err, lb, static_cast<double>(ls->stats.accept_errors.load()));
    Families::add(proxy_err, lb, static_cast<double>(ls->stats.proxy_header_errors.load()));
    Families::add(path_norm, lb, static_cast<double>(ls->stats.paths_normalized.load()));
    for (int e = 1; e < http::kPathErrorCount; ++e) {
      Labels rl = lb;
      rl.push_back({"reason", std::string(http::path_error_name(static_cast<http::PathError>(e)))});
      Families::add(path_rej, rl, static_cast<double>(ls->stats.paths_rejected[static_cast<std::size_t>(e)].load()));
    }
  }
}

// Requests by route, upgrades refused and local replies.
void request_families(Families& fs, proxy::Gateway& gw, const Snap& snap) {
  proxy::GatewayStats& gs = gw.stats();
  auto& req = fs.family("stealgate_http_requests_total", "Requests by route, method and status class.",
                        MetricType::Counter);
  auto& dur = fs.family("stealgate_http_request_duration_seconds", "Request duration by route.", MetricType::Histogram);
  auto emit_route = [&](const proxy::RouteStats& rs) {
    std::string route = rs.name.empty() ? "none" : rs.name;
    for (std::size_t m = 0; m < proxy::kMethods.size(); ++m) {
      for (std::size_t c = 0; c < 6; ++c) {
        uint64_t v = rs.requests[m][c].load(std::memory_order_relaxed);
        if (v == 0) continue;
        Families::add(req,
                      {{"code_class", c == 0 ? "none" : std::to_string(c) + "xx"},
                       {"method", std::string(proxy::kMethods[m])},
                       {"route", route}},
                      static_cast<double>(v));
      }
    }
    if (rs.duration.count.load(std::memory_order_relaxed) > 0) add_histogram(dur, {{"route", route}}, rs.duration);
  };
  if (snap) {
    for (const auto& rs : snap->route_stats) emit_route(*rs);
    emit_route(*snap->unrouted_stats);
  }
  auto& upg = fs.family("stealgate_http_upgrades_refused_total",
                        "Upgrades not let through: not_allowed (the route does not list the protocol: the request "
                        "went upstream without Upgrade), unexpected_101 (the upstream switched to a protocol not "
                        "offered: 502).",
                        MetricType::Counter);
  Families::add(upg, {{"reason", "not_allowed"}}, static_cast<double>(gs.upgrades_refused.load()));
  Families::add(upg, {{"reason", "unexpected_101"}}, static_cast<double>(gs.upgrades_unexpected.load()));
  fs.scalar("stealgate_local_replies_total", "Responses generated by stealgate itself.", MetricType::Counter,
            static_cast<double>(gs.local_replies.load()));
}

// Admission control: permits, queues, shedding and refusals.
void admission_families(Families& fs, proxy::Gateway& gw, const Snap& snap) {
  proxy::GatewayStats& gs = gw.stats();
  auto& inflight = fs.family("stealgate_admission_in_flight", "Admitted requests holding a permit.", MetricType::Gauge);
  auto& queued = fs.family("stealgate_admission_queued", "Requests waiting for a permit.", MetricType::Gauge);
  if (snap) {
    auto add_limit = [&](const exec::Semaphore* sem, std::size_t cap, Labels labels) {
      if (sem == nullptr) return;
      Families::add(inflight, labels, static_cast<double>(cap) - static_cast<double>(sem->available()));
      Families::add(queued, std::move(labels), static_cast<double>(sem->waiting()));
    };
    add_limit(snap->global_limit.get(), snap->config->limits.max_concurrent_requests, {{"scope", "global"}});
    for (std::size_t i = 0; i < snap->route_limits.size(); ++i) {
      const auto& r = snap->config->routes[i];
      add_limit(snap->route_limits[i].get(), r.max_concurrent_requests, {{"route", r.name}, {"scope", "route"}});
    }
    for (const auto& [name, sem] : snap->cluster_limits) {
      const auto* c = snap->config->find_cluster(name);
      add_limit(sem.get(), c ? c->max_concurrent_requests : 0, {{"cluster", name}, {"scope", "cluster"}});
    }
  }
  auto& shedding = fs.family("stealgate_admission_shedding",
                             "1 while adaptive shedding refuses requests instead of queueing them, by signal.",
                             MetricType::Gauge);
  proxy::LoadShedder& sh = gw.shedder();
  Families::add(shedding, {{"signal", "queue_sojourn"}}, sh.sojourn.shedding() ? 1 : 0);
  Families::add(shedding, {{"signal", "scheduling_delay"}}, sh.scheduling.shedding() ? 1 : 0);
  auto& episodes = fs.family("stealgate_admission_shedding_episodes_total",
                             "Times adaptive shedding started, by signal.", MetricType::Counter);
  Families::add(episodes, {{"signal", "queue_sojourn"}}, static_cast<double>(sh.sojourn.times_entered()));
  Families::add(episodes, {{"signal", "scheduling_delay"}}, static_cast<double>(sh.scheduling.times_entered()));
  auto& rejected = fs.family("stealgate_admission_rejected_total", "Requests refused with 503 by admission control.",
                             MetricType::Counter);
  static const char* scopes[] = {"global", "route", "cluster"};
  static const char* reasons[] = {"queue_full", "queue_timeout", "shed"};
  for (std::size_t s = 0; s < 3; ++s) {
    for (std::size_t r = 0; r < 3; ++r) {
      Families::add(rejected, {{"reason", reasons[r]}, {"scope", scopes[s]}},
                    static_cast<double>(gs.admission.rejected[s][r].load()));
    }
  }
  add_histogram(fs.family("stealgate_admission_wait_seconds", "Time queued requests waited for a permit.",
                          MetricType::Histogram),
                {}, gs.admission.wait);
}

// routes[].rate_limit, for the routes that have one.
void rate_limit_families(Families& fs, const Snap& snap) {
  if (!snap) return;
  auto& limited = fs.family("stealgate_rate_limited_total", "Requests refused with 429 by the route's rate_limit.",
                            MetricType::Counter);
  auto& keys = fs.family("stealgate_rate_limit_keys", "Keys (clients, header values) a route's rate_limit holds.",
                         MetricType::Gauge);
  auto& evicted = fs.family("stealgate_rate_limit_evictions_total",
                            "Keys a route's rate_limit forgot before their allowance was whole again "
                            "(max_keys is too small for the clients there are).",
                            MetricType::Counter);
  for (std::size_t i = 0; i < snap->rate_limits.size(); ++i) {
    const proxy::RateLimiter* rl = snap->rate_limits[i].get();
    if (rl == nullptr) continue;
    const Labels route{{"route", snap->config->routes[i].name}};
    Families::add(limited, route, static_cast<double>(snap->route_stats[i]->rate_limited.load()));
    Families::add(keys, route, static_cast<double>(rl->keys()));
    Families::add(evicted, route, static_cast<double>(rl->evicted()));
  }
}

// The workers' threads as the kernel schedules them (absent where it keeps no schedstat).
void worker_cpu_families(Families& fs, const std::vector<std::optional<ThreadCpuStats>>& workers) {
  const bool any = std::any_of(workers.begin(), workers.end(), [](const auto& w) { return w.has_value(); });
  if (!any) return;
  auto& cpu = fs.family("stealgate_executor_worker_cpu_seconds_total",
                        "CPU time of a worker's thread (the kernel's schedstat).", MetricType::Counter);
  auto& wait = fs.family("stealgate_executor_worker_cpu_wait_seconds_total",
                         "Time a worker's thread was ready to run but waited for a CPU (the kernel's run-queue "
                         "delay): the CPUs it may use were busy with other threads or processes.",
                         MetricType::Counter);
  for (std::size_t w = 0; w < workers.size(); ++w) {
    if (!workers[w]) continue;
    Families::add(cpu, {{"worker", std::to_string(w)}}, workers[w]->cpu_seconds);
    Families::add(wait, {{"worker", std::to_string(w)}}, workers[w]->wait_seconds);
  }
}

// Reloads, dropped log lines, the build and the process collector's standard figures.
void process_families(Families& fs, proxy::Gateway& gw, const std::optional<ProcessStats>& p) {
  proxy::GatewayStats& gs = gw.stats();
  auto& reloads = fs.family("stealgate_config_reloads_total", "Configuration reloads by result.", MetricType::Counter);
  Families::add(reloads, {{"result", "success"}}, static_cast<double>(gs.reloads_ok.load()));
  Families::add(reloads, {{"result", "failure"}}, static_cast<double>(gs.reloads_failed.load()));
  fs.scalar("stealgate_config_last_reload_success_timestamp_seconds",
            "Unix time of the last successful load of the configuration (at start or by a reload).",
            MetricType::Gauge, static_cast<double>(gs.last_reload_success_unix.load()));
  fs.scalar("stealgate_config_last_reload_successful",
            "1 when the last load of the configuration file succeeded; 0 while a reload's file is rejected.",
            MetricType::Gauge, gs.last_reload_ok.load() ? 1.0 : 0.0);
  fs.scalar("stealgate_log_lines_dropped_total", "Log lines dropped because the async log queue was full.",
            MetricType::Counter, static_cast<double>(log::dropped_lines()));
  Families::add(fs.family("stealgate_build_info", "Build information.", MetricType::Gauge),
                {{"version", STEALGATE_VERSION}}, 1);
  if (p) {
    fs.scalar("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", MetricType::Counter,
              p->cpu_seconds);
    fs.scalar("process_resident_memory_bytes", "Resident memory size in bytes.", MetricType::Gauge,
              p->resident_bytes);
    fs.scalar("process_virtual_memory_bytes", "Virtual memory size in bytes.", MetricType::Gauge, p->virtual_bytes);
    fs.scalar("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
              MetricType::Gauge, p->start_time_seconds);
    fs.scalar("process_open_fds", "Number of open file descriptors.", MetricType::Gauge, p->open_fds);
    fs.scalar("process_max_fds", "Maximum number of open file descriptors.", MetricType::Gauge, p->max_fds);
    worker_cpu_families(fs, p->workers);
  }
}

}  // namespace

std::string render(proxy::Gateway& gw, const std::optional<ProcessStats>& process) {
  Families fs;
  const Snap snap = gw.snapshot();
  executor_families(fs, gw.runtime().exec().stats());
  memory_families(fs);
  Families::add(fs.family("stealgate_executor_io_driver_info", "The I/O driver the workers run on (value 1).",
                          MetricType::Gauge),
                {{"driver", std::string(io::io_driver_name(gw.runtime().driver_kind()))}}, 1);
  io_uring_families(fs, gw.runtime().ring_stats());
  task_families(fs, *gw.runtime().exec().handle().scheduler());
  downstream_families(fs, gw, snap);
  request_families(fs, gw, snap);
  upstream_families(fs, snap);
  admission_families(fs, gw, snap);
  rate_limit_families(fs, snap);
  process_families(fs, gw, process);
  tls_families(fs, gw, snap);
  std::ostringstream os;
  prometheus::TextSerializer{}.Serialize(os, std::vector<MetricFamily>(fs.out.begin(), fs.out.end()));
  return os.str();
}

}  // namespace sg::metrics
