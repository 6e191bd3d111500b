// stealgate: composition root. Parses the command line, loads the configuration, starts
// the runtime, the gateway and the admin endpoint, then runs the control loop on the main
// thread: every signal is blocked in all threads and taken here with sigwait, so reload,
// log reopening and draining never race with request handling.
#include <signal.h>
#include <systemd/sd-daemon.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "admin/admin_server.h"
#include "app/options.h"
#include "app/upgrade.h"
#include "common/log.h"
#include "config/loader.h"
#include "exec/reclaim.h"
#include "io/inherited.h"
#include "io/openssl_memory.h"
#include "io/runtime.h"
#include "proxy/gateway.h"
#include "stealgate_version.h"
#include "upstream/cluster.h"

namespace {

using namespace sg;

log::Options log_options(const config::LoggingSection& l) {
  log::Options o;
  o.level = l.level;
  o.format = l.format == config::LogFormat::kJson ? log::Format::kJson : log::Format::kText;
  o.access_log = l.access_log;
  o.access_log_path = l.access_log_path;
  o.access_format = l.access_log_format == config::LogFormat::kJson ? log::Format::kJson : log::Format::kText;
  o.queue_size = l.queue_size;
  return o;
}

// The executor's long-poll hook (at most one call per worker per second): a task held a
// worker that long without yielding, so every other task queued on it waited as long.
void log_long_poll(const exec::LongPoll& p) {
  const double ms = static_cast<double>(p.poll.duration_ns) / 1e6;
  const char* kind = exec::task_kind_name(p.poll.kind);
  if (p.poll.task_id != 0) {
    SG_LOG_WARN("long poll: {:.1f} ms on worker {} by {} task {} \"{}\" ({} more long polls not logged)", ms,
                p.poll.worker, kind, p.poll.task_id, p.poll.name, p.unreported);
  } else {
    SG_LOG_WARN("long poll: {:.1f} ms on worker {} by a {} task ({} more long polls not logged)", ms, p.poll.worker,
                kind, p.unreported);
  }
}

exec::RuntimeConfig runtime_config(const config::RuntimeSection& r) {
  exec::RuntimeConfig c;
  c.worker_threads = r.worker_threads;
  c.global_queue_interval = r.global_queue_interval;
  c.adaptive_global_queue_interval = r.adaptive_global_queue_interval;
  c.event_interval = r.event_interval;
  c.coop_budget = r.coop_budget;
  c.max_lifo_polls_per_tick = r.max_lifo_polls_per_tick;
  c.max_blocking_threads = r.max_blocking_threads;
  c.task_diagnostics = r.task_diagnostics;
  c.poll_timing = true;  // long polls are logged and exported in every deployment
  c.long_poll_threshold = r.long_poll_threshold;
  c.driver_visit_after_poll = std::chrono::microseconds(r.driver_visit_after_poll_us);
  c.yield_between_batches = r.yield_between_batches;
  c.on_long_poll = &log_long_poll;
  c.idle_memory_reclaim = r.idle_memory_reclaim;
  return c;
}

void notify(const std::string& msg) { sd_notify(0, msg.c_str()); }

// Takes the listening sockets systemd (or a launcher speaking its LISTEN_FDS protocol)
// passed in, and clears the variables so nothing we start inherits them by mistake.
std::string inherit_sockets(io::InheritedSockets& out) {
  char** names = nullptr;
  int n = sd_listen_fds_with_names(1, &names);
  std::vector<std::string> list;
  if (names != nullptr) {
    for (char** p = names; *p != nullptr; ++p) {
      list.emplace_back(*p);
      std::free(*p);
    }
    std::free(names);
  }
  if (n < 0) return std::string("cannot take the inherited sockets (LISTEN_FDS): ") + std::strerror(-n);
  if (n == 0) return "";
  return out.adopt(SD_LISTEN_FDS_START, n, list);
}

uint64_t monotonic_usec() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000 + static_cast<uint64_t>(ts.tv_nsec) / 1000;
}

void log_errors(const config::LoadResult& r) {
  for (const auto& e : r.errors) SG_LOG_ERROR("{}", e.to_string());
}

// Every listening socket, named as its listener (all of a reuse_port group's sockets: a
// connection queued on any of them must reach the new process; a shared socket once, not
// its copies), the admin endpoint as "admin".
std::vector<app::HandedSocket> listening_sockets(proxy::Gateway& gw, const admin::AdminServer& admin) {
  std::vector<app::HandedSocket> out;
  auto snap = gw.snapshot();
  for (const auto& ls : gw.listener_states()) {
    if (ls->stopping.load()) continue;
    const config::ListenerSection* l = snap ? snap->listener(ls->key) : nullptr;
    for (io::TcpListener& s : ls->shared ? std::span(ls->sockets).first(1) : std::span(ls->sockets)) {
      if (s.is_open()) out.push_back({s.native_handle(), l != nullptr ? l->name : ls->key});
    }
  }
  if (admin.native_handle() >= 0) out.push_back({admin.native_handle(), "admin"});
  return out;
}

// SIGUSR2: hands the sockets to a new copy of the binary. True when it serves (this
// process then drains and exits); false when it failed (this process keeps serving).
bool hand_over(proxy::Gateway& gw, admin::AdminServer& admin, const std::string& binary,
               const std::vector<std::string>& argv) {
  SG_LOG_INFO("binary upgrade: starting {}", binary);
  app::Successor next = app::start_successor(binary, argv, listening_sockets(gw, admin), std::chrono::seconds(30));
  if (!next.error.empty()) {
    SG_LOG_ERROR("binary upgrade failed: {}; this process keeps serving", next.error);
    return false;
  }
  // The admin endpoint is the new process's alone from now on: health checks would meet
  // this one's "503 draining" (on io_uring, every one: its accept is the socket's first
  // waiter), and scrapes its counters, for the whole drain.
  admin.stop();
  SG_LOG_INFO("binary upgrade: new process {} is serving; this one drains and exits", next.pid);
  notify("MAINPID=" + std::to_string(next.pid) + "\nSTATUS=handed over to pid " + std::to_string(next.pid));
  return true;
}

// The running daemon: what the control loop on the main thread acts on.
class Daemon {
 public:
  Daemon(const app::Options& opts, std::vector<std::string> argv, std::shared_ptr<const config::Config> cfg,
         const sigset_t& signals)
      : opts_(opts), argv_(std::move(argv)), binary_(app::own_binary_path()), cfg_(std::move(cfg)),
        signals_(signals) {}

  // The executor on the configured I/O driver: `auto` takes io_uring where the kernel
  // allows it and says why not otherwise; an explicit io_uring that fails stops the start.
  // STEALGATE_IO_DRIVER (auto, io_uring, epoll) overrides the file, e.g. from a systemd
  // drop-in, without editing the configuration.
  std::string start_runtime(const config::RuntimeSection& r) {
    std::string_view setting = config::io_driver_setting(r.io_driver);
    std::string_view source = "runtime.io_driver";
    if (const char* env = std::getenv("STEALGATE_IO_DRIVER"); env != nullptr && *env != '\0') {
      setting = env;
      source = "STEALGATE_IO_DRIVER";
      if (setting != "auto" && setting != "io_uring" && setting != "epoll") {
        return "STEALGATE_IO_DRIVER is \"" + std::string(setting) + "\"; expected auto, io_uring or epoll";
      }
    }
    std::string why;
    auto kind = io::choose_io_driver(setting, why);
    if (!kind.ok()) return std::string(source) + " is io_uring, but " + why;
    if (setting == "auto" && !why.empty()) SG_LOG_WARN("io driver: epoll (io_uring is not available: {})", why);
    auto rt = io::Runtime::create(runtime_config(r), *kind);
    if (!rt.ok()) {
      return "cannot start the " + std::string(io::io_driver_name(*kind)) + " driver: " + rt.error().message();
    }
    rt_ = std::move(*rt);
    SG_LOG_INFO("io driver: {} ({}: {})", io::io_driver_name(*kind), source, setting);
    return "";
  }

  // Inherits sockets, starts the runtime, the gateway and the admin endpoint; "" or why not.
  std::string start() {
    if (std::string err = inherit_sockets(inherited_); !err.empty()) return err;
    if (inherited_.size() != 0) SG_LOG_INFO("{} inherited listening socket(s)", inherited_.size());
    if (std::string err = start_runtime(cfg_->runtime); !err.empty()) return err;
    gw_ = std::make_unique<proxy::Gateway>(*rt_);
    gw_->set_inherited(&inherited_);
    if (std::string err = gw_->start(cfg_); !err.empty()) return err;
    if (std::string err = start_admin(cfg_->admin); !err.empty()) return err;
    for (const std::string& s : inherited_.close_unclaimed()) {
      SG_LOG_WARN("inherited socket {} matches no listener: closed", s);
    }
    app::report_ready_to_predecessor();
    SG_LOG_INFO("stealgate {} started: {} workers on {}, {} listener(s), {} route(s), {} cluster(s)",
                STEALGATE_VERSION, rt_->exec().config().worker_threads, io::io_driver_name(rt_->driver_kind()),
                cfg_->listeners.size(), cfg_->routes.size(), cfg_->clusters.size());
    notify("READY=1\nSTATUS=serving " + std::to_string(cfg_->routes.size()) + " routes");
    return "";
  }

  // Takes signals until one ends the process: reload, log reopening, binary upgrade, drain.
  void serve() {
    for (;;) {
      int sig = 0;
      if (sigwait(&signals_, &sig) != 0) continue;
      if (sig == SIGUSR1) {
        log::reopen();
        SG_LOG_INFO("log files reopened");
        continue;
      }
      if (sig == SIGHUP) {
        reload();
        continue;
      }
      if (sig == SIGUSR2 && !hand_over(*gw_, *admin_, binary_, argv_)) continue;
      drain(sig);
      return;
    }
  }

  // Tears down in dependency order (also after a failed start).
  ~Daemon() {
    if (admin_) admin_->stop();
    admin_.reset();
    gw_.reset();
    if (rt_) rt_->shutdown();
    rt_.reset();
  }

 private:
  std::string start_admin(const config::AdminSection& a) {
    admin_ = std::make_unique<admin::AdminServer>(*gw_);
    admin_cfg_ = a;
    if (!a.enabled) return "";
    if (std::string err = admin_->start(a.address); !err.empty()) return err;
    SG_LOG_INFO("admin endpoint on {} (port {}): /metrics /healthz /ready /config{}", a.address.text(),
                admin_->port(), admin_->inherited() ? " (inherited socket)" : "");
    return "";
  }

  void reload() {
    notify("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(monotonic_usec()) + "\nSTATUS=reloading");
    config::LoadResult next = config::load_file(opts_.config_path);
    std::string err;
    if (!next.ok()) {
      log_errors(next);
      gw_->stats().reload_rejected();
      err = opts_.config_path + " has " + std::to_string(next.errors.size()) + " error(s)";
    } else {
      err = gw_->reload(next.config);
    }
    if (!err.empty()) {
      SG_LOG_ERROR("reload rejected: {}; the previous configuration keeps serving", err);
      notify("READY=1\nSTATUS=reload failed; previous configuration serving");
      return;
    }
    const config::Config& c = *next.config;
    if (!(c.runtime == cfg_->runtime)) {
      SG_LOG_WARN("runtime settings changed; they take effect after a restart");
    }
    log::setup(log_options(c.logging));
    if (c.admin.enabled != admin_cfg_.enabled || c.admin.address.text() != admin_cfg_.address.text()) {
      admin_->stop();
      if (std::string e = start_admin(c.admin); !e.empty()) SG_LOG_ERROR("{}", e);
    }
    cfg_ = next.config;
    SG_LOG_INFO("configuration reloaded: {} route(s), {} cluster(s), {} listener(s)", c.routes.size(),
                c.clusters.size(), c.listeners.size());
    notify("READY=1\nSTATUS=serving " + std::to_string(c.routes.size()) + " routes");
  }

  // SIGTERM / SIGINT, or a finished hand-over: graceful drain; a second signal forces it.
  void drain(int sig) {
    const std::string grace = cfg_->drain_idle_grace.count() == 0
                                  ? ""
                                  : "; idle keep-alive connections take one more request for " +
                                        std::to_string(cfg_->drain_idle_grace.count()) + "ms";
    SG_LOG_INFO("received {}, draining (up to {}ms{}; send it again to force)",
                sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "SIGUSR2 (binary upgrade)",
                cfg_->drain_timeout.count(), grace);
    notify("STOPPING=1\nSTATUS=draining");
    gw_->begin_drain();
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + cfg_->drain_timeout;
    // Until the grace ends, an idle keep-alive connection may still take one request (and
    // close after it): a client that sends on it as the drain begins gets its answer.
    std::optional<std::chrono::steady_clock::time_point> close_idle_at = start + cfg_->drain_idle_grace;
    for (;;) {
      if (close_idle_at && std::chrono::steady_clock::now() >= *close_idle_at) {
        gw_->close_idle_sessions();
        close_idle_at.reset();
      }
      if (gw_->wait_drained(std::chrono::milliseconds(50))) return;
      timespec zero{0, 0};
      int again = sigtimedwait(&signals_, nullptr, &zero);
      const bool second = again == SIGTERM || again == SIGINT;
      if (!second && std::chrono::steady_clock::now() < deadline) continue;
      SG_LOG_WARN("{}: closing {} connection(s) now", second ? "second signal" : "drain timeout",
                  gw_->active_sessions());
      gw_->abort_sessions();
      gw_->wait_drained(std::chrono::milliseconds(2000));
      return;
    }
  }

  const app::Options& opts_;
  const std::vector<std::string> argv_;
  // Where a binary upgrade finds the new binary: this path, read before it is replaced.
  const std::string binary_;
  std::shared_ptr<const config::Config> cfg_;
  sigset_t signals_;
  io::InheritedSockets inherited_;  // outlives the gateway: reloads may still adopt from it
  std::unique_ptr<io::Runtime> rt_;
  std::unique_ptr<proxy::Gateway> gw_;
  std::unique_ptr<admin::AdminServer> admin_;
  config::AdminSection admin_cfg_;
};

int run(const app::Options& opts, const std::vector<std::string>& argv, bool openssl_hooks) {
  // First, before any thread exists (the log backend is the first): every thread inherits
  // this mask, so these signals are only ever taken by sigwait, never delivered with the
  // default (terminate) disposition. Blocked from here, one that arrives while the process
  // starts (logrotate's SIGUSR1, a SIGHUP) waits and is handled once it serves.
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGHUP, SIGTERM, SIGINT, SIGUSR1, SIGUSR2}) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  config::LoadResult loaded = config::load_file(opts.config_path);
  if (!loaded.ok()) {
    std::cerr << loaded.error_text();
    std::cerr << "stealgate: configuration " << opts.config_path << " is invalid; not starting\n";
    return 1;
  }
  log::setup(log_options(loaded.config->logging));
  if (!openssl_hooks) {
    SG_LOG_WARN("OpenSSL allocated before its memory hooks were installed: TLS record buffers are not recycled");
  }
  int rc = 0;
  {
    Daemon d(opts, argv, loaded.config, set);
    if (std::string err = d.start(); !err.empty()) {
      SG_LOG_ERROR("startup failed: {}", err);
      std::cerr << "stealgate: " << err << "\n";
      rc = 1;
    } else {
      d.serve();
    }
  }
  if (rc == 0) SG_LOG_INFO("stopped");
  log::shutdown();
  return rc;
}

// --check-config: the file, and what a start would find of the endpoint names in it
// (systemd runs this before a start and a reload, so it must refuse what the start would).
int check_config(const std::string& path) {
  auto refused = [&](std::string_view verdict, std::size_t errors) {
    std::cerr << "stealgate: configuration " << path << " " << verdict << " (" << errors << " error"
              << (errors == 1 ? "" : "s") << ")\n";
    return 1;
  };
  config::LoadResult r = config::load_file(path);
  if (!r.ok()) {
    std::cerr << r.error_text();
    return refused("is invalid", r.errors.size());
  }
  const upstream::NameReport names = upstream::look_up_names(*r.config);
  for (const std::string& w : names.warnings) std::cerr << "warning: " << w << "\n";
  for (const std::string& e : names.errors) std::cerr << "error: " << e << "\n";
  if (!names.errors.empty()) return refused("cannot start", names.errors.size());
  std::cout << "stealgate: configuration " << path << " is valid\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything calls OpenSSL (config checks load certificates): see the header.
  const bool openssl_hooks = io::install_openssl_memory_hooks();
  std::vector<std::string> args(argv + 1, argv + argc);
  app::Options opts;
  std::string error;
  if (!app::parse_options(args, opts, error)) {
    std::cerr << "stealgate: " << error << "\nTry 'stealgate --help' for more information.\n";
    return 2;
  }
  switch (opts.mode) {
    case app::Options::Mode::kHelp:
      std::cout << app::usage();
      return 0;
    case app::Options::Mode::kVersion:
      std::cout << "stealgate " << STEALGATE_VERSION << "\n";
      return 0;
    case app::Options::Mode::kCheckConfig:
      return check_config(opts.config_path);
    case app::Options::Mode::kPrintConfig: {
      config::LoadResult r = config::load_file(opts.config_path);
      if (!r.ok()) {
        std::cerr << r.error_text();
        return 1;
      }
      std::cout << config::to_yaml(*r.config);
      return 0;
    }
    case app::Options::Mode::kConfigReference:
      std::cout << config::config_reference();
      return 0;
    case app::Options::Mode::kRun:
      exec::fix_malloc_mmap_threshold();  // before the workers' arenas exist
      break;
  }
  return run(opts, std::vector<std::string>(argv, argv + argc), openssl_hooks);
}
