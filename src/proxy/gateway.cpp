#include "proxy/gateway.h"

#include <algorithm>
#include <ctime>
#include <tuple>

#include "common/log.h"
#include "proxy/session.h"

namespace sg::proxy {

std::string listener_key(const config::ListenerSection& l) {
  return l.address.port == 0 ? l.name + "@" + l.address.text() : l.address.text();
}

std::shared_ptr<const tls::ServerContext> Snapshot::tls_for(const std::string& key) const {
  auto it = tls_by_key.find(key);
  return it == tls_by_key.end() ? nullptr : it->second;
}

const config::ListenerSection* Snapshot::listener(const std::string& key) const {
  auto it = listeners_by_key.find(key);
  return it == listeners_by_key.end() ? nullptr : it->second;
}

Gateway::Gateway(io::Runtime& rt) : rt_(rt), health_(rt) {
  listener_list_.store(std::make_shared<const std::vector<std::shared_ptr<ListenerState>>>());
}

Gateway::~Gateway() {
  stop_dns_refresh();
  begin_drain();
  abort_sessions();
  wait_drained(std::chrono::milliseconds(5000));
  health_.stop();
  if (delay_probe_.valid()) {
    delay_probe_.cancel();
    delay_probe_.wait();
  }
  for (auto& r : pool_reapers_) r.cancel();
  for (auto& r : pool_reapers_) r.wait();
}

namespace {

// Measures the executor's scheduling delay: how long a task that became runnable waits in
// a run queue before it runs (yield_now puts it at the back of its worker's queue).
exec::Task<void> scheduling_delay_probe(LoadShedder& shedder, std::chrono::milliseconds period) {
  for (;;) {
    co_await io::sleep_for(period);
    auto t0 = std::chrono::steady_clock::now();
    co_await exec::yield_now();
    auto now = std::chrono::steady_clock::now();
    shedder.scheduling.observe(now - t0, now);
  }
}

// How often a worker's pool reaper looks at its idle upstream connections. Idle timeouts
// are seconds to minutes; a connection the upstream closed holds a descriptor at most this
// much longer.
constexpr std::chrono::seconds kPoolReapInterval{1};

// Runs pinned to one worker: only that worker's thread touches its idle lists.
exec::Task<void> pool_reaper(Gateway& gw) {
  for (;;) {
    co_await io::sleep_for(kPoolReapInterval);
    std::shared_ptr<const Snapshot> snap = gw.snapshot();
    if (!snap) continue;
    for (const auto& c : snap->clusters) {
      for (const auto& e : c->endpoints()) e->pool().reap();
    }
  }
}

}  // namespace

void Gateway::start_pool_reapers() {
  const std::size_t n = rt_.exec().config().worker_threads;
  for (std::size_t w = 0; w < n; ++w) {
    pool_reapers_.push_back(rt_.exec().handle().spawn_pinned(
        w, pool_reaper(*this), {exec::TaskKind::kMaintenance, "pool reaper " + std::to_string(w)}));
  }
}

void Gateway::apply_shedding(const config::LimitsSection& lim) {
  shedder_.configure(lim.shed_target, lim.shed_interval);
  if (lim.shed_target.count() == 0) {
    if (delay_probe_.valid()) delay_probe_.cancel();  // the probe is not needed
    delay_probe_ = {};
    return;
  }
  if (delay_probe_.valid()) delay_probe_.cancel();
  // A few samples per interval, so that "above target for the whole interval" is a
  // statement about several of them.
  auto period = std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(lim.shed_interval) / 5,
                           std::chrono::milliseconds(1), std::chrono::milliseconds(20));
  delay_probe_ =
      rt_.handle().spawn(scheduling_delay_probe(shedder_, period), {exec::TaskKind::kProbe, "scheduling delay"});
}

void Gateway::publish_listeners() {
  auto v = std::make_shared<std::vector<std::shared_ptr<ListenerState>>>();
  for (const auto& [key, ls] : listeners_) v->push_back(ls);
  listener_list_.store(std::move(v));
}

std::string Gateway::build_listener_tls(const config::Config& cfg, Snapshot& snap) {
  for (const auto& l : cfg.listeners) {
    if (!l.tls) continue;
    const std::string key = listener_key(l);
    std::shared_ptr<tls::TicketKeys>& keys = ticket_keys_[key];
    if (!keys) keys = std::make_shared<tls::TicketKeys>(l.tls->ticket_key_rotation);
    keys->set_rotation(l.tls->ticket_key_rotation);
    std::string why;
    auto tc = tls::ServerContext::build(*l.tls, keys, why);
    if (!tc) return "listener " + l.name + ": " + why;
    snap.tls_by_key[key] = std::move(tc);
  }
  return {};
}

std::string Gateway::build_snapshot(std::shared_ptr<const config::Config> cfg, std::shared_ptr<Snapshot>& out) {
  auto snap = std::make_shared<Snapshot>();
  snap->config = cfg;
  std::shared_ptr<const Snapshot> prev = snapshot();
  if (std::string err = build_clusters(*cfg, prev.get(), *snap); !err.empty()) return err;
  if (std::string err = build_listener_tls(*cfg, *snap); !err.empty()) return err;
  std::string err;
  auto table = routing::RouteTable::build(*cfg, snap->clusters, err);
  if (!table.ok()) return err;
  snap->routes = std::move(*table);
  attach_route_stats(*cfg, *snap);
  build_admission_limits(*cfg, prev.get(), *snap);
  build_rate_limits(*cfg, prev.get(), *snap);
  for (const auto& l : cfg->listeners) snap->listeners_by_key[listener_key(l)] = &l;
  out = std::move(snap);
  return "";
}

std::string Gateway::build_clusters(const config::Config& cfg, const Snapshot* prev, Snapshot& snap) {
  // Resolve names (blocking getaddrinfo, on this control thread, never a worker) and carry
  // unchanged endpoints (pools, health) over. A reload (`prev`) is refused for a new name
  // that does not resolve; the start is not (Cluster::build).
  for (const auto& c : cfg.clusters) {
    const upstream::Cluster* old = nullptr;
    if (prev != nullptr) {
      for (const auto& pc : prev->clusters) {
        if (pc->name() == c.name) old = pc.get();
      }
    }
    std::string err;
    auto built = upstream::Cluster::build(c, old, rt_.exec().config().worker_threads, err, prev != nullptr);
    if (!built.ok()) return err;
    snap.clusters.push_back(std::move(*built));
  }
  return "";
}

void Gateway::attach_route_stats(const config::Config& cfg, Snapshot& snap) {
  // Statistics live across reloads, keyed by name.
  for (const auto& r : cfg.routes) {
    auto& rs = route_stats_[r.name];
    if (!rs) rs = std::make_shared<RouteStats>(r.name);
    snap.route_stats.push_back(rs);
  }
  auto& unrouted = route_stats_[""];
  if (!unrouted) unrouted = std::make_shared<RouteStats>("");
  snap.unrouted_stats = unrouted;
}

void Gateway::build_admission_limits(const config::Config& cfg, const Snapshot* prev, Snapshot& snap) {
  // Semaphores are kept when their size is unchanged (permits in flight stay valid); a
  // resized one starts fresh and the old one drains with its requests.
  const auto& lim = cfg.limits;
  const config::Config* pc = prev != nullptr ? prev->config.get() : nullptr;
  const std::size_t old_queue = pc != nullptr ? pc->limits.max_queued_requests : 0;
  auto keep_or_make = [&](std::shared_ptr<exec::Semaphore> old, std::size_t permits,
                          std::size_t old_permits) -> std::shared_ptr<exec::Semaphore> {
    if (permits == 0) return nullptr;
    const std::size_t queue = lim.max_queued_requests;
    auto sem = old && permits == old_permits && queue == old_queue ? std::move(old)
                                                                   : std::make_shared<exec::Semaphore>(permits, queue);
    sem->set_lifo_after(lim.lifo_after);  // kept semaphores take a changed order at once
    return sem;
  };
  snap.global_limit = keep_or_make(prev != nullptr ? prev->global_limit : nullptr, lim.max_concurrent_requests,
                                   pc != nullptr ? pc->limits.max_concurrent_requests : 0);
  for (const auto& r : cfg.routes) {
    std::shared_ptr<exec::Semaphore> old;
    std::size_t old_n = 0;
    for (std::size_t j = 0; pc != nullptr && j < pc->routes.size(); ++j) {
      if (pc->routes[j].name == r.name) {
        old = prev->route_limits[j];
        old_n = pc->routes[j].max_concurrent_requests;
      }
    }
    snap.route_limits.push_back(keep_or_make(old, r.max_concurrent_requests, old_n));
  }
  for (const auto& c : cfg.clusters) {
    std::shared_ptr<exec::Semaphore> old;
    std::size_t old_n = 0;
    if (prev != nullptr) {
      auto it = prev->cluster_limits.find(c.name);
      if (it != prev->cluster_limits.end()) old = it->second;
      if (const auto* oc = pc->find_cluster(c.name)) old_n = oc->max_concurrent_requests;
    }
    if (auto s = keep_or_make(old, c.max_concurrent_requests, old_n)) snap.cluster_limits[c.name] = s;
  }
}

void Gateway::build_rate_limits(const config::Config& cfg, const Snapshot* prev, Snapshot& snap) {
  // A route's limiter is kept across a reload that leaves its settings alone, so a reload
  // does not hand every client a fresh allowance.
  for (const auto& r : cfg.routes) {
    std::shared_ptr<RateLimiter> kept;
    for (std::size_t j = 0; prev != nullptr && j < prev->config->routes.size(); ++j) {
      const auto& old = prev->config->routes[j];
      if (old.name == r.name && r.rate_limit && old.rate_limit == r.rate_limit) kept = prev->rate_limits[j];
    }
    if (!kept && r.rate_limit) kept = std::make_shared<RateLimiter>(*r.rate_limit);
    snap.rate_limits.push_back(std::move(kept));
  }
}

namespace {
// `reuse_port: auto` is a socket per worker for plain HTTP, where it saved 4-27% of a new
// connection's CPU (fewer parks and steals: each worker's connections arrive on its own
// socket; README.md, Throughput), on an address no other process holds. Not for TLS: a
// connection hashed to a worker busy with a handshake (~300 us) waits for it, where a
// socket shared by every worker gives it to one that waits.
io::ListenOptions listen_options(const config::ListenerSection& l, std::size_t workers,
                                 std::chrono::milliseconds in_use_wait) {
  io::ListenOptions opts;
  opts.backlog = l.backlog;
  opts.in_use_wait = in_use_wait;
  if (l.reuse_port == config::AutoFlag::kOn) {
    opts.reuse_port = true;
  } else if (l.reuse_port == config::AutoFlag::kAuto && !l.tls && workers > 1) {
    opts.reuse_port = true;
    opts.exclusive_address = true;
  }
  return opts;
}
}  // namespace

std::string Gateway::bind_listener(const config::ListenerSection& l, std::shared_ptr<ListenerState>& out,
                                   std::chrono::milliseconds in_use_wait) {
  std::string err;
  auto ep = upstream::resolve(l.address, err);
  if (!ep.ok()) return "listener \"" + l.name + "\" " + l.address.text() + ": " + err;
  const std::size_t workers = rt_.exec().config().worker_threads;
  const io::ListenOptions opts = listen_options(l, workers, in_use_wait);
  io::ListeningGroup got = io::listen_group(rt_.context(), inherited_, l.name, *ep, opts, workers);
  if (got.listeners.empty()) return "listener \"" + l.name + "\" " + l.address.text() + ": " + got.error;
  if (got.in_use_waited.count() > 0) {
    SG_LOG_WARN("listener {} on {}: the address was in use for {} ms (a previous process releasing it)", l.name,
                l.address.text(), got.in_use_waited.count());
  }
  if (!got.note.empty()) {
    SG_LOG_WARN("listener {} on {}: reuse_port: {} of {} sockets (one per worker): {}", l.name, l.address.text(),
                got.listeners.size(), workers, got.note);
  }
  auto ls = std::make_shared<ListenerState>();
  ls->gateway = this;
  ls->key = listener_key(l);
  ls->address = l.address.text();
  const io::tcp::endpoint bound = got.listeners.front().local_endpoint();
  ls->bound_port = bound.port();
  if (!bound.address().is_unspecified()) ls->local_authority = io::endpoint_text(bound);
  ls->inherited = got.inherited;
  ls->sockets = std::move(got.listeners);
  // A TLS listener's one socket is accepted from on every worker (io_uring): a new
  // connection then goes to a worker that waits for one instead of waiting for a handshake
  // (~300 us) on a busy one. Not a plain listener's: its work per connection is short, and
  // the single-shot accept that sharing takes per connection cost more than the waits
  // (new connection per request: 0.93-0.94x req/s, +0.2-0.35 io_uring_enter per request).
  if (!opts.reuse_port && l.tls && rt_.driver_kind() == io::IoDriverKind::kIoUring) share_socket(*ls, workers);
  out = std::move(ls);
  return "";
}

void Gateway::share_socket(ListenerState& ls, std::size_t workers) {
  while (ls.sockets.size() < workers) {
    auto copy = ls.sockets.front().share();
    if (!copy.ok()) {  // (out of descriptors) fewer workers accept: it still serves
      SG_LOG_WARN("listener on {}: accepting on {} of {} workers: {}", ls.address, ls.sockets.size(), workers,
                  copy.error().message());
      break;
    }
    ls.sockets.push_back(std::move(*copy));
  }
  ls.shared = ls.sockets.size() > 1;
}

void Gateway::start_accepting(const std::shared_ptr<ListenerState>& ls) {
  if (ls->sockets.size() == 1) {
    ls->accept_tasks.push_back(
        rt_.handle().spawn(accept_loop(*this, ls, ls->sockets.front()), {exec::TaskKind::kListener, ls->address}));
    return;
  }
  // A socket per worker (reuse_port), or one socket shared by the workers (TLS, io_uring): each
  // loop stays on its worker, so a connection it takes starts there, and its wait sits on
  // that worker's ring. One loop for the whole listener waits on one ring: a new
  // connection then waits for that worker while it is busy (a TLS handshake: ~300 us),
  // even when the other is idle, and the connections it accepts are stolen by a woken
  // worker. (A shared socket's loops take one connection per wait, so that the next goes
  // to another waiting ring: io/uring.h, "Accepts".)
  const std::size_t workers = rt_.exec().config().worker_threads;
  for (std::size_t i = 0; i < ls->sockets.size(); ++i) {
    ls->accept_tasks.push_back(rt_.handle().spawn_pinned(
        i % workers, accept_loop(*this, ls, ls->sockets[i]),
        {exec::TaskKind::kListener, ls->address + " #" + std::to_string(i + 1)}));
  }
}

namespace {
void close_sockets(ListenerState& ls) {
  for (io::TcpListener& s : ls.sockets) s.close();
}
}  // namespace

void Gateway::stop_listener(const std::shared_ptr<ListenerState>& ls) {
  ls->stopping.store(true, std::memory_order_release);
  for (exec::JoinHandle<void>& t : ls->accept_tasks) t.cancel();
  for (exec::JoinHandle<void>& t : ls->accept_tasks) t.wait();  // no accept loop touches a socket
  ls->accept_tasks.clear();
  // On io_uring a socket's multishot accept may hold connections the kernel completed
  // that no loop took yet: served, not closed (a binary upgrade hands the socket on, and
  // its backlog with it, but not these).
  exec::JoinHandle<void> rest = rt_.handle().spawn(serve_taken(*this, ls), {exec::TaskKind::kListener, ls->address});
  rest.wait();
  close_sockets(*ls);
}

namespace {
void log_listening(const Snapshot& snap, const ListenerState& ls) {
  const config::ListenerSection* l = snap.listener(ls.key);
  const std::string n = std::to_string(ls.sockets.size());
  const std::string sockets = ls.shared                ? ", accepting on " + n + " workers"
                              : ls.sockets.size() > 1 ? ", " + n + " sockets (reuse_port)"
                                                      : "";
  SG_LOG_INFO("listener {} on {} (port {}){}{}{}", l->name, ls.address, ls.bound_port,
              ls.inherited ? " on an inherited socket" : "", sockets, l->tls ? ", TLS" : "");
}
}  // namespace

std::string Gateway::start(std::shared_ptr<const config::Config> cfg) {
  std::lock_guard lk(control_mu_);
  std::shared_ptr<Snapshot> snap;
  if (std::string err = build_snapshot(cfg, snap); !err.empty()) return err;
  std::vector<std::shared_ptr<ListenerState>> bound;
  for (const auto& l : cfg->listeners) {
    std::shared_ptr<ListenerState> ls;
    // At a start (a restart, often) the previous process may still hold the address for a
    // moment; a reload fails at once instead (it holds the control path, and the old
    // configuration keeps serving).
    if (std::string err = bind_listener(l, ls, kStartInUseWait); !err.empty()) {
      for (auto& b : bound) close_sockets(*b);
      return err;
    }
    bound.push_back(ls);
  }
  snap_.store(snap, std::memory_order_release);
  for (auto& ls : bound) {
    listeners_[ls->key] = ls;
    start_accepting(ls);
    log_listening(*snap, *ls);
  }
  publish_listeners();
  health_.start(snap->clusters);
  apply_shedding(cfg->limits);
  start_pool_reapers();
  dns_thread_ = std::jthread([this](std::stop_token stop) { dns_refresh_loop(stop); });
  stats_.config_loaded();
  ready_.store(true, std::memory_order_release);
  return "";
}

namespace {
// A listener keeps its sockets across a reload, and with them the settings they were made
// with: say so when the new config would make other ones (`reuse_port: auto` and `true`
// make the same sockets for plain HTTP).
void warn_socket_settings_kept(const config::ListenerSection* was, const config::ListenerSection& now,
                               std::size_t workers) {
  if (was == nullptr) return;
  const auto made = [workers](const config::ListenerSection& l) {
    const io::ListenOptions o = listen_options(l, workers, std::chrono::milliseconds(0));
    return std::tuple(o.backlog, o.reuse_port, l.tls.has_value());
  };
  if (made(*was) == made(now)) return;
  SG_LOG_WARN("listener {}: backlog and reuse_port are settings of its sockets, which a reload keeps, and so is "
              "whether every worker accepts (TLS listeners on io_uring); the new values take effect at a restart "
              "(a binary upgrade hands the sockets over as they are)",
              now.name);
}
}  // namespace

std::string Gateway::reload(std::shared_ptr<const config::Config> cfg) {
  std::lock_guard lk(control_mu_);
  if (draining()) return "shutting down";
  std::shared_ptr<Snapshot> snap;
  std::string err = build_snapshot(cfg, snap);
  std::vector<std::shared_ptr<ListenerState>> added;
  if (err.empty()) {
    const std::shared_ptr<const Snapshot> old = snapshot();
    for (const auto& l : cfg->listeners) {
      if (listeners_.count(listener_key(l)) != 0) {  // unchanged address: keep the sockets
        warn_socket_settings_kept(old->listener(listener_key(l)), l, rt_.exec().config().worker_threads);
        continue;
      }
      std::shared_ptr<ListenerState> ls;
      err = bind_listener(l, ls, std::chrono::milliseconds(0));
      if (!err.empty()) break;
      added.push_back(ls);
    }
  }
  if (!err.empty()) {
    for (auto& a : added) close_sockets(*a);
    stats_.reload_rejected();
    return err;
  }
  snap_.store(snap, std::memory_order_release);
  for (auto& ls : added) {
    listeners_[ls->key] = ls;
    start_accepting(ls);
    log_listening(*snap, *ls);
  }
  for (auto it = listeners_.begin(); it != listeners_.end();) {
    if (snap->listener(it->first) == nullptr) {
      SG_LOG_INFO("no longer listening on {}", it->second->address);
      stop_listener(it->second);
      it = listeners_.erase(it);
    } else {
      ++it;
    }
  }
  publish_listeners();
  health_.start(snap->clusters);
  wake_dns_refresh();
  apply_shedding(cfg->limits);
  stats_.reload_accepted();
  return "";
}

void Gateway::begin_drain() {
  std::lock_guard lk(control_mu_);
  if (draining_.exchange(true, std::memory_order_acq_rel)) return;
  for (auto& [addr, ls] : listeners_) stop_listener(ls);
  listeners_.clear();
  publish_listeners();
  health_.stop();
}

void Gateway::close_idle_sessions() {
  idle_closed_.store(true);  // before reading the states (SessionEntry)
  std::lock_guard sk(sessions_mu_);
  for (SessionEntry* e = sessions_; e != nullptr; e = e->next_) {
    int expected = SessionEntry::kIdle;
    if (e->state.compare_exchange_strong(expected, SessionEntry::kClosing)) exec::cancel_task(e->task_);
  }
}

bool Gateway::wait_drained(std::chrono::milliseconds timeout) {
  std::unique_lock lk(sessions_mu_);
  return sessions_cv_.wait_for(lk, timeout, [&] { return sessions_ == nullptr && sessions_starting_ == 0; });
}

void Gateway::abort_sessions() {
  std::lock_guard lk(sessions_mu_);
  aborting_ = true;  // and a task that has not entered yet ends when it does
  for (SessionEntry* e = sessions_; e != nullptr; e = e->next_) {
    e->state.store(SessionEntry::kClosing);
    exec::cancel_task(e->task_);
  }
}

std::size_t Gateway::active_sessions() const {
  std::lock_guard lk(sessions_mu_);
  return session_count_ + sessions_starting_;
}

std::vector<std::pair<std::string, uint16_t>> Gateway::bound_listeners() const {
  std::lock_guard lk(control_mu_);
  std::vector<std::pair<std::string, uint16_t>> out;
  for (const auto& [addr, ls] : listeners_) out.emplace_back(addr, ls->bound_port);
  return out;
}

std::vector<std::shared_ptr<ListenerState>> Gateway::listener_states() const {
  return *listener_list_.load();
}

void Gateway::expect_session() {
  std::lock_guard lk(sessions_mu_);
  ++sessions_starting_;
}

bool Gateway::enter_session(SessionEntry& e) {
  std::lock_guard lk(sessions_mu_);
  --sessions_starting_;
  // Accepted even while draining begins (the accept raced the listener's close): the entry
  // is fresh, so its first request is still answered.
  e.task_ = exec::current_task();
  e.prev_ = nullptr;
  e.next_ = sessions_;
  if (sessions_ != nullptr) sessions_->prev_ = &e;
  sessions_ = &e;
  ++session_count_;
  if (aborting_) e.state.store(SessionEntry::kClosing);
  return !aborting_;
}

void Gateway::leave_session(SessionEntry& e) {
  std::lock_guard lk(sessions_mu_);
  (e.prev_ != nullptr ? e.prev_->next_ : sessions_) = e.next_;
  if (e.next_ != nullptr) e.next_->prev_ = e.prev_;
  e.prev_ = e.next_ = nullptr;
  e.task_ = nullptr;
  --session_count_;
  if (sessions_ == nullptr && sessions_starting_ == 0) sessions_cv_.notify_all();
}

}  // namespace sg::proxy
