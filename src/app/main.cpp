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
#include <string>
#include <vector>

#include "admin/admin_server.h"
#include "app/options.h"
#include "app/upgrade.h"
#include "common/log.h"
#include "config/loader.h"
#include "io/inherited.h"
#include "io/reactor.h"
#include "proxy/gateway.h"
#include "stealgate_version.h"

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

exec::RuntimeConfig runtime_config(const config::RuntimeSection& r) {
  exec::RuntimeConfig c;
  c.worker_threads = r.worker_threads;
  c.global_queue_interval = r.global_queue_interval;
  c.adaptive_global_queue_interval = r.adaptive_global_queue_interval;
  c.event_interval = r.event_interval;
  c.coop_budget = r.coop_budget;
  c.max_lifo_polls_per_tick = r.max_lifo_polls_per_tick;
  c.max_blocking_threads = r.max_blocking_threads;
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

// Every listening socket, named as its listener (the admin endpoint as "admin").
std::vector<app::HandedSocket> listening_sockets(proxy::Gateway& gw, const admin::AdminServer& admin) {
  std::vector<app::HandedSocket> out;
  auto snap = gw.snapshot();
  for (const auto& ls : gw.listener_states()) {
    if (!ls->listener || !ls->listener->is_open() || ls->stopping.load()) continue;
    const config::ListenerSection* l = snap ? snap->listener(ls->key) : nullptr;
    out.push_back({ls->listener->native_handle(), l != nullptr ? l->name : ls->key});
  }
  if (admin.native_handle() >= 0) out.push_back({admin.native_handle(), "admin"});
  return out;
}

// SIGUSR2: hands the sockets to a new copy of the binary. True when it serves (this
// process then drains and exits); false when it failed (this process keeps serving).
bool hand_over(proxy::Gateway& gw, const admin::AdminServer& admin, const std::string& binary,
               const std::vector<std::string>& argv) {
  SG_LOG_INFO("binary upgrade: starting {}", binary);
  app::Successor next = app::start_successor(binary, argv, listening_sockets(gw, admin), std::chrono::seconds(30));
  if (!next.error.empty()) {
    SG_LOG_ERROR("binary upgrade failed: {}; this process keeps serving", next.error);
    return false;
  }
  SG_LOG_INFO("binary upgrade: new process {} is serving; this one drains and exits", next.pid);
  notify("MAINPID=" + std::to_string(next.pid) + "\nSTATUS=handed over to pid " + std::to_string(next.pid));
  return true;
}

int run(const app::Options& opts, const std::vector<std::string>& argv) {
  // Where a binary upgrade finds the new binary: this path, read before it is replaced.
  const std::string binary = app::own_binary_path();
  config::LoadResult loaded = config::load_file(opts.config_path);
  if (!loaded.ok()) {
    std::cerr << loaded.error_text();
    std::cerr << "stealgate: configuration " << opts.config_path << " is invalid; not starting\n";
    return 1;
  }
  std::shared_ptr<const config::Config> cfg = loaded.config;

  // Before any thread exists (the log backend is the first): every thread inherits this
  // mask, so these signals are only ever taken by sigwait below, never delivered to a
  // thread with the default (terminate) disposition.
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGHUP, SIGTERM, SIGINT, SIGUSR1, SIGUSR2}) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  log::setup(log_options(cfg->logging));

  io::InheritedSockets inherited;  // outlives the gateway: reloads may still adopt from it
  if (std::string err = inherit_sockets(inherited); !err.empty()) {
    SG_LOG_ERROR("startup failed: {}", err);
    std::cerr << "stealgate: " << err << "\n";
    log::shutdown();
    return 1;
  }
  if (inherited.size() != 0) SG_LOG_INFO("{} inherited listening socket(s)", inherited.size());
  auto rt = std::make_unique<io::Runtime>(runtime_config(cfg->runtime));
  auto gw = std::make_unique<proxy::Gateway>(*rt);
  gw->set_inherited(&inherited);
  if (std::string err = gw->start(cfg); !err.empty()) {
    SG_LOG_ERROR("startup failed: {}", err);
    std::cerr << "stealgate: " << err << "\n";
    gw.reset();
    rt.reset();
    log::shutdown();
    return 1;
  }
  auto admin = std::make_unique<admin::AdminServer>(*gw);
  config::AdminSection admin_cfg = cfg->admin;
  if (admin_cfg.enabled) {
    if (std::string err = admin->start(admin_cfg.address); !err.empty()) {
      SG_LOG_ERROR("startup failed: {}", err);
      std::cerr << "stealgate: " << err << "\n";
      admin.reset();
      gw.reset();
      rt.reset();
      log::shutdown();
      return 1;
    }
    SG_LOG_INFO("admin endpoint on {} (port {}): /metrics /healthz /ready /config{}", admin_cfg.address.text(),
                admin->port(), admin->inherited() ? " (inherited socket)" : "");
  }
  for (const std::string& s : inherited.close_unclaimed()) {
    SG_LOG_WARN("inherited socket {} matches no listener: closed", s);
  }
  app::report_ready_to_predecessor();
  SG_LOG_INFO("stealgate {} started: {} workers, {} listener(s), {} route(s), {} cluster(s)", STEALGATE_VERSION,
              rt->exec().config().worker_threads, cfg->listeners.size(), cfg->routes.size(), cfg->clusters.size());
  notify("READY=1\nSTATUS=serving " + std::to_string(cfg->routes.size()) + " routes");

  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (sig == SIGUSR1) {
      log::reopen();
      SG_LOG_INFO("log files reopened");
      continue;
    }
    if (sig == SIGUSR2 && !hand_over(*gw, *admin, binary, argv)) continue;
    if (sig == SIGHUP) {
      notify("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(monotonic_usec()) + "\nSTATUS=reloading");
      config::LoadResult next = config::load_file(opts.config_path);
      if (!next.ok()) {
        log_errors(next);
        gw->stats().reloads_failed.fetch_add(1);
        SG_LOG_ERROR("reload rejected: {} has {} error(s); the previous configuration keeps serving",
                     opts.config_path, next.errors.size());
        notify("READY=1\nSTATUS=reload failed; previous configuration serving");
        continue;
      }
      if (std::string err = gw->reload(next.config); !err.empty()) {
        SG_LOG_ERROR("reload rejected: {}; the previous configuration keeps serving", err);
        notify("READY=1\nSTATUS=reload failed; previous configuration serving");
        continue;
      }
      if (next.config->runtime.worker_threads != cfg->runtime.worker_threads ||
          next.config->runtime.coop_budget != cfg->runtime.coop_budget) {
        SG_LOG_WARN("runtime settings changed; they take effect after a restart");
      }
      log::setup(log_options(next.config->logging));
      if (next.config->admin.enabled != admin_cfg.enabled || next.config->admin.address.text() != admin_cfg.address.text()) {
        admin->stop();
        admin = std::make_unique<admin::AdminServer>(*gw);
        admin_cfg = next.config->admin;
        if (admin_cfg.enabled) {
          if (std::string err = admin->start(admin_cfg.address); !err.empty()) {
            SG_LOG_ERROR("{}", err);
          } else {
            SG_LOG_INFO("admin endpoint on {} (port {}): /metrics /healthz /ready /config{}", admin_cfg.address.text(),
                        admin->port(), admin->inherited() ? " (inherited socket)" : "");
          }
        }
      }
      cfg = next.config;
      SG_LOG_INFO("configuration reloaded: {} route(s), {} cluster(s), {} listener(s)", cfg->routes.size(),
                  cfg->clusters.size(), cfg->listeners.size());
      notify("READY=1\nSTATUS=serving " + std::to_string(cfg->routes.size()) + " routes");
      continue;
    }
    // SIGTERM / SIGINT: graceful drain; a second signal forces the exit.
    SG_LOG_INFO("received {}, draining (up to {}ms; send it again to force)",
                sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "SIGUSR2 (binary upgrade)",
                cfg->drain_timeout.count());
    notify("STOPPING=1\nSTATUS=draining");
    gw->begin_drain();
    auto deadline = std::chrono::steady_clock::now() + cfg->drain_timeout;
    bool forced = false;
    while (!gw->wait_drained(std::chrono::milliseconds(50))) {
      timespec zero{0, 0};
      int again = sigtimedwait(&set, nullptr, &zero);
      if (again == SIGTERM || again == SIGINT) {
        forced = true;
        SG_LOG_WARN("second signal: closing {} connection(s) now", gw->active_sessions());
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        forced = true;
        SG_LOG_WARN("drain timeout: closing {} connection(s)", gw->active_sessions());
        break;
      }
    }
    if (forced) {
      gw->abort_sessions();
      gw->wait_drained(std::chrono::milliseconds(2000));
    }
    break;
  }
  admin->stop();
  admin.reset();
  gw.reset();
  rt->shutdown();
  rt.reset();
  SG_LOG_INFO("stopped");
  log::shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
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
    case app::Options::Mode::kCheckConfig: {
      config::LoadResult r = config::load_file(opts.config_path);
      if (!r.ok()) {
        std::cerr << r.error_text();
        std::cerr << "stealgate: configuration " << opts.config_path << " is invalid (" << r.errors.size()
                  << " error" << (r.errors.size() == 1 ? "" : "s") << ")\n";
        return 1;
      }
      std::cout << "stealgate: configuration " << opts.config_path << " is valid\n";
      return 0;
    }
    case app::Options::Mode::kPrintConfig: {
      config::LoadResult r = config::load_file(opts.config_path);
      if (!r.ok()) {
        std::cerr << r.error_text();
        return 1;
      }
      std::cout << config::to_yaml(*r.config);
      return 0;
    }
    case app::Options::Mode::kRun:
      break;
  }
  return run(opts, std::vector<std::string>(argv, argv + argc));
}
