// The gateway's own sections: runtime, admin, listeners (and their TLS), limits, logging.
#include "config/loader.h"
#include "config/sections.h"
#include "tls/certs.h"

namespace sg::config::detail {

const std::vector<std::pair<std::string, TlsVersion>> kTlsVersions = {{"1.2", TlsVersion::k12},
                                                                      {"1.3", TlsVersion::k13}};

namespace {

Field<RuntimeSection> worker_threads() {
  return Fields<RuntimeSection>::custom(
      "worker_threads",
      "worker threads; `auto` = CPUs available to the process (affinity mask, cgroup quota)",
      [](const MapView& m, RuntimeSection& r) {
        const YAML::Node n = m.get("worker_threads");
        if (n.IsDefined() && !(n.IsScalar() && n.Scalar() == "auto")) {
          m.read_num("worker_threads", r.worker_threads, 1, 1024);
        }
      },
      [](YAML::Emitter& e, const RuntimeSection& r) {
        e << YAML::Key << "worker_threads" << YAML::Value;
        if (r.worker_threads == 0) e << "auto";
        else e << r.worker_threads;
      });
}

const std::vector<std::pair<std::string, LogFormat>> kLogFormats = {{"text", LogFormat::kText},
                                                                    {"json", LogFormat::kJson}};
const std::vector<std::pair<std::string, http::SlashPolicy>> kSlashPolicies = {
    {"keep", http::SlashPolicy::kKeep}, {"reject", http::SlashPolicy::kReject}, {"decode", http::SlashPolicy::kDecode}};

}  // namespace

const Table<RuntimeSection>& runtime_table() {
  using F = Fields<RuntimeSection>;
  using R = RuntimeSection;
  static const Table<RuntimeSection> t{
      "runtime",
      {worker_threads(),
       F::choice("io_driver", &R::io_driver,
                 std::vector<std::pair<std::string, IoDriver>>{
                     {"auto", IoDriver::kAuto}, {"io_uring", IoDriver::kIoUring}, {"epoll", IoDriver::kEpoll}},
                 "`io_uring` (a ring per worker), `epoll` (Asio's reactor, shared by the workers) or `auto`: io_uring "
                 "where the kernel allows it (`kernel.io_uring_disabled`, a container's seccomp profile can refuse "
                 "it), else epoll with the reason logged. An explicit `io_uring` that the kernel refuses stops the "
                 "start. The environment variable `STEALGATE_IO_DRIVER` (same values) overrides this key, e.g. from a "
                 "systemd drop-in. The driver in use is logged at start and exported as "
                 "`stealgate_executor_io_driver_info{driver}`; on io_uring, "
                 "`stealgate_executor_io_uring_ops_in_flight{worker}` (one per waiting socket), "
                 "`stealgate_executor_io_uring_cancels_total{worker,from}`, "
                 "`stealgate_executor_io_uring_receive_buffers{worker}` (the ring's 4 KiB receive buffers: 32 at "
                 "start, doubled up to 1024 once more than 1 receive in 16 has kept finding none free for a "
                 "second), "
                 "`stealgate_executor_io_uring_receive_buffer_shortages_total{worker}` (receives that found none) "
                 "and `stealgate_executor_io_uring_receive_buffers_in_use{worker}` (buffers holding bytes not yet "
                 "read) show each ring"),
       F::number("global_queue_interval", &R::global_queue_interval, 2, 1u << 20,
                 "ticks between checks of the injection queue before the local queue"),
       F::flag("adaptive_global_queue_interval", &R::adaptive_global_queue_interval,
               "retune that interval so injected tasks wait about 200 µs at most"),
       F::number("event_interval", &R::event_interval, 1, 1u << 20,
                 "ticks between non-blocking polls of the I/O driver by a busy worker"),
       F::number("driver_visit_after_poll_us", &R::driver_visit_after_poll_us, 0, 1000000,
                 "a task poll at least this many microseconds long makes its worker poll the I/O driver right after "
                 "it, instead of only every `event_interval` ticks: long polls, such as TLS handshakes, would "
                 "otherwise keep that worker's new connections, reads and queued sends waiting for dozens of them. "
                 "Counted in `stealgate_executor_overdue_driver_polls_total{worker}`; `0` never"),
       F::flag("yield_between_batches", &R::yield_between_batches,
               "a worker that runs out of tasks while its I/O driver may hold completions gives up its CPU once "
               "(`sched_yield`) before taking them: on io_uring when its ring holds some after it has sent a "
               "batch's submissions, on epoll before it looks into the reactor. Only a ring's own worker takes "
               "its completions, so on CPUs shared with other busy threads (the other workers, a backend, a "
               "sidecar's application) a worker that never runs dry would otherwise hold its CPU until the "
               "kernel's scheduler tick, while the connections of a worker waiting for that CPU wait as long; "
               "on epoll a worker that ran dry slept and was woken for the next event. Measured on 2 CPUs shared "
               "with the load generator and the backend: small keep-alive GETs' p99 4.6 -> 1.4 ms on io_uring "
               "at the same req/s and CPU; on epoll p99 0.64-0.70x, and 0.86-0.89x CPU per request with a "
               "connection per request. With no other thread waiting for the CPU the yield returns at once. The "
               "price, where a CPU-bound process shares the CPUs: it takes the CPU at a yield for a whole time "
               "slice (beside one busy loop: p99 5.1 -> 7.8 ms, 0.95x req/s); such yields are counted in "
               "`stealgate_executor_long_batch_yields_total{worker}`, and where they grow, `false` (or cores of "
               "its own) serves better. All yields: `stealgate_executor_batch_yields_total{worker}`"),
       F::number("coop_budget", &R::coop_budget, 1, 1u << 20,
                 "operations a task may complete per scheduling before it must yield"),
       F::number("max_lifo_polls_per_tick", &R::max_lifo_polls_per_tick, 0, 1u << 20,
                 "consecutive polls from the LIFO slot per tick"),
       F::number("max_blocking_threads", &R::max_blocking_threads, 1, 100000,
                 "upper bound of the blocking pool (DNS, file I/O)"),
       F::flag("task_diagnostics", &R::task_diagnostics,
               "keep a record per task (kind, name, polls, busy / queued / idle time, longest poll, wakes by source, "
               "last worker) for `/debug/tasks`, `/debug/scheduler` and `stealgate_executor_tasks{kind}`. Off, tasks "
               "keep only their kind (long-poll logs still say it). Measured cost: +1.3% user-space instructions per "
               "proxied small GET (callgrind); poll timing, always on, is +0.7% of that"),
       F::duration("long_poll_threshold", &R::long_poll_threshold,
                   "a task poll at least this long (wall time on its worker) is counted in "
                   "`stealgate_executor_long_polls_total{worker}` and logged, at most once a second per worker, "
                   "with the task's kind and name: `long poll: 23.4 ms on worker 1 by admin task 17 "
                   "\"admin client\" (0 more long polls not logged)`",
                   Duration{1}),
       F::duration("idle_memory_reclaim", &R::idle_memory_reclaim,
                   "a worker that has had no work for this long (health checks, the pool reaper and admin requests "
                   "do not count) gives back the memory it keeps for the next requests (free task and "
                   "coroutine-frame slabs, read buffers, parsers, head and TLS record buffers) and malloc returns "
                   "its free pages to the system, so the resident size falls back after a spike of connections; "
                   "`0` never. "
                   "Counted in `stealgate_executor_memory_reclaims_total{worker}` and "
                   "`stealgate_executor_memory_reclaimed_bytes_total{worker}`")}};
  return t;
}

const Table<AdminSection>& admin_table() {
  using F = Fields<AdminSection>;
  static const Table<AdminSection> t{
      "admin",
      {F::flag("enabled", &AdminSection::enabled, "serve the admin endpoint"),
       F::address("address", &AdminSection::address,
                  "`/metrics` `/healthz` `/ready` `/config` `/debug/tasks` `/debug/scheduler`; never expose it "
                  "publicly")}};
  return t;
}

const Table<TlsCertificate>& certificate_table() {
  using F = Fields<TlsCertificate>;
  static const Table<TlsCertificate> t{
      "listeners[].tls.certificates[]",
      {F::file("cert", &TlsCertificate::cert, "PEM file: the certificate, then its chain").require(),
       F::file("key", &TlsCertificate::key, "PEM file: its private key").require()},
      [](const MapView& m, TlsCertificate& c) {
        if (c.cert.empty() || c.key.empty()) return;
        if (std::string why = tls::check_certificate(c.cert, c.key, nullptr); !why.empty()) {
          m.ctx().error(m.node(), m.where(), why);
        }
      }};
  return t;
}

namespace {

std::string only_http11(std::string& protocol) {
  return protocol == "http/1.1" ? "" : "unsupported protocol \"" + protocol + "\" (stealgate speaks http/1.1)";
}

void parse_trusted_proxies(const MapView&, ListenerSection& l) {
  for (const std::string& text : l.trusted_proxies) {
    routing::AddressBlock b;
    if (routing::parse_address_block(text, b).empty()) l.trusted_proxy_blocks.push_back(b);  // else reported
  }
}

void check_client_auth(const MapView& m, ListenerTls& t) {
  if (t.client_auth != ClientAuth::kOff && t.client_ca.empty()) {
    m.ctx().error(m.has("client_auth") ? m.get("client_auth") : m.node(), m.path("client_auth"),
                  "client certificates need client_ca (the CA file they must chain to)");
  }
}

}  // namespace

const Table<ListenerTls>& listener_tls_table() {
  using F = Fields<ListenerTls>;
  using T = ListenerTls;
  static const Table<ListenerTls> t{
      "listeners[].tls",
      {F::list("certificates", &T::certificates, certificate_table(),
               "`{ cert, key }` pairs of PEM files; relative paths are relative to this file. A handshake gets the "
               "certificate whose names (subjectAltName DNS entries, else the subject's CN) equal the requested "
               "name, else one whose wildcard (`*.example.com`: one label) matches, else the first",
               "a TLS listener needs at least one certificate")
           .shown("required"),
       F::choice("min_version", &T::min_version, kTlsVersions,
                 "`\"1.2\"` or `\"1.3\"` (quote it: YAML reads `1.2` as a number)"),
       F::text("ciphers", &T::ciphers, "TLS 1.2 cipher list, OpenSSL syntax (`ECDHE+AESGCM`)",
               [](const std::string& v) { return tls::check_ciphers(v, false); })
           .shown("OpenSSL's default"),
       F::text("ciphersuites", &T::ciphersuites,
               "TLS 1.3 suites (`TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256`)",
               [](const std::string& v) { return tls::check_ciphers(v, true); })
           .shown("OpenSSL's default"),
       F::strings("alpn", &T::alpn, "protocols offered by ALPN; a client offering none of them goes on without ALPN",
                  only_http11),
       F::flag("session_tickets", &T::session_tickets,
               "resumption by tickets. Keys are made in memory, rotate every `ticket_key_rotation`, the two before "
               "the current one are still accepted (and such a ticket is replaced), and they survive reloads (not "
               "restarts)"),
       F::duration("ticket_key_rotation", &T::ticket_key_rotation, "how often a new ticket key is made",
                   Duration{1000}),
       F::number("tickets_per_handshake", &T::tickets_per_handshake, 0, 8,
                 "TLS 1.3 tickets sent after a full handshake (after a resumption: one, unless `0`). A client "
                 "spends one per connection and gets a new one each time, so one is enough unless clients open "
                 "several connections at once and want each of them resumed; each ticket costs ~3% of a full "
                 "handshake. `0`: no TLS 1.3 resumption"),
       F::number("session_cache_size", &T::session_cache_size, 0, 10'000'000,
                 "server-side session cache for clients without tickets (`0` = off; not kept across reloads)"),
       F::duration("session_timeout", &T::session_timeout, "how long a session may be resumed", Duration{1000}),
       F::duration("handshake_timeout", &T::handshake_timeout,
                   "a client that has not finished its handshake by then is closed"),
       F::choice("client_auth", &T::client_auth,
                 std::vector<std::pair<std::string, ClientAuth>>{
                     {"off", ClientAuth::kOff},
                    {"optional", ClientAuth::kOptional},
                    {"required", ClientAuth::kRequired}},
                 "client certificates: `off`, `optional` (asked for; one that is presented must verify), `required`"),
       F::file("client_ca", &T::client_ca,
               "PEM file of the CAs client certificates must chain to (required unless `client_auth: off`)",
               tls::check_ca_file),
       F::text("client_subject_header", &T::client_subject_header,
               "the verified client certificate's subject (RFC 2253, `CN=alice,O=Example`) goes upstream in this "
               "header; a header of that name from the client is always removed, so an upstream can trust it",
               [](const std::string& v) { return header_name_refusal(v); })},
      check_client_auth};
  return t;
}

const Table<ListenerSection>& listener_table() {
  using F = Fields<ListenerSection>;
  using L = ListenerSection;
  static const Table<ListenerSection> t{
      "listeners[]",
      {F::text("name", &L::name, "used by `routes[].match.listener` and metrics labels").shown("`listener<N>`"),
       F::address("address", &L::address, "where to accept connections").require(),
       F::number("backlog", &L::backlog, 1, 65535, "listen(2) backlog"),
       F::auto_flag("reuse_port", &L::reuse_port,
                 "`true`: a listening socket per worker (SO_REUSEPORT), each accepted on its own worker; the kernel "
                 "spreads new connections over them by address hash, not by load, and another process of the same "
                 "user may bind the address too and share its connections. `false`: one socket; on io_uring a TLS "
                 "listener's is accepted from on every worker, so that a new connection goes to a worker waiting for "
                 "one; otherwise one worker accepts. `auto`: `true` for plain HTTP, except that the address must be "
                 "free (a second process on it fails as with `false`); `false` for TLS, where a hash can put a "
                 "connection behind another's handshake (~300 us). A socket per worker saved 4-27% of the CPU of a "
                 "new connection in our runs (README.md, Throughput). Takes effect when the listener binds its "
                 "sockets (a start, or a reload that adds it); inherited sockets (socket activation, binary "
                 "upgrade) are used as they are: one without SO_REUSEPORT stays one, quietly with `auto`, with a "
                 "warning with `true`. For a socket per worker under socket activation, hand over one per worker "
                 "(deploy/README.md)"),
       F::number("max_connections", &L::max_connections, 1, 10'000'000, "open client connections on this listener"),
       F::choice("on_max_connections", &L::on_max_connections,
                 std::vector<std::pair<std::string, OverflowAction>>{{"reject", OverflowAction::kReject503},
                                                                     {"backlog", OverflowAction::kBacklog}},
                 "`reject`: accept and answer 503 + close (on a TLS listener: close, without a handshake); `backlog`: "
                 "stop accepting until a slot frees"),
       F::flag("proxy_protocol", &L::proxy_protocol,
               "every connection starts with a PROXY protocol header (version 1 or 2) from the load balancer in "
               "front, whose source address is then the client's (`source` rules, rate limits, "
               "`X-Forwarded-For`, the access log); a connection without one is closed. Turn it on only where "
               "every connection comes through such a balancer"),
       F::duration("header_timeout", &L::header_timeout,
                   "first byte to complete request head (slowloris: 408); also bounds the PROXY protocol header"),
       F::duration("idle_timeout", &L::idle_timeout,
                   "keep-alive wait for the next request; also the idle timeout of upgraded tunnels"),
       F::duration("body_timeout", &L::body_timeout, "longest gap between reads of a request body (408)"),
       F::duration("send_timeout", &L::send_timeout, "longest gap between writes to a slow client"),
       F::size("max_target_bytes", &L::max_target_bytes,
               "request-target length (414); HAProxy's default buffer takes as much, nginx 8 KiB"),
       F::size("max_header_bytes", &L::max_header_bytes, "header section size (431); nginx's default is 4 × 8 KiB"),
       F::number("max_headers", &L::max_headers, 1, 10000,
                 "header field lines (431); the size limit is what ordinary traffic meets first"),
       F::size("max_body_bytes", &L::max_body_bytes, "request body size (413); `0` = unlimited"),
       F::choice("path_normalization", [](auto& l) -> auto& { return l.path.policy; },
                 std::vector<std::pair<std::string, http::PathPolicy>>{{"normalize", http::PathPolicy::kNormalize},
                                                                       {"reject", http::PathPolicy::kReject},
                                                                       {"off", http::PathPolicy::kOff}},
                 "how the request path is treated before routing (below): `normalize`, `reject` (400 for any path "
                 "that is not already normal), `off` (**unsafe** behind access rules: routes see the path as sent)"),
       F::choice("escaped_slashes", [](auto& l) -> auto& { return l.path.escaped_slashes; }, kSlashPolicies,
                 "`%2F` and `%5C` in the path: `keep` (never decoded, never a separator: forwarded as `%2F`), "
                 "`reject` (400), `decode` (become `/`)"),
       F::choice("backslashes", [](auto& l) -> auto& { return l.path.backslashes; }, kSlashPolicies,
                 "a bare `\\` in the path: `keep` (an ordinary character), `reject` (400), `decode` (becomes `/`)"),
       F::choice("path_parameters", [](auto& l) -> auto& { return l.path.path_parameters; },
                 std::vector<std::pair<std::string, http::ParamPolicy>>{{"keep", http::ParamPolicy::kKeep},
                                                                        {"reject", http::ParamPolicy::kReject}},
                 "a bare `;` in the path: `keep` (an ordinary character, as RFC 3986 has it), `reject` (400: in front "
                 "of servlet containers, which read `/admin;x` as `/admin`)"),
       F::optional_section("tls", &L::tls, listener_tls_table(), "terminate TLS on this listener (below)")
           .shown("absent (plain HTTP)"),
       F::strings("trusted_proxies", &L::trusted_proxies,
                  "HTTP proxies in front whose `X-Forwarded-For` is believed (`[10.0.0.0/8]`): a request from "
                  "one has as its client the last address in that header that is not itself such a proxy "
                  "(`source` rules, rate limits, `ring_hash`, the access log; below)",
                  address_block_refusal, false)
           .shown("none")},
      parse_trusted_proxies};
  return t;
}

const Table<LimitsSection>& limits_table() {
  using F = Fields<LimitsSection>;
  using L = LimitsSection;
  static const Table<LimitsSection> t{
      "limits",
      {F::number("max_concurrent_requests", &L::max_concurrent_requests, 0, 100'000'000,
                 "requests forwarded at once (global); `0` = unlimited"),
       F::number("max_queued_requests", &L::max_queued_requests, 0, 100'000'000,
                 "requests waiting for a permit; beyond it: 503 at once"),
       F::duration("queue_timeout", &L::queue_timeout,
                   "longest wait for a permit; then 503 (each wait ends between 80% and 100% of it)"),
       F::custom(
           "retry_after", "`Retry-After` on 503s (admission, shedding, no healthy endpoint); whole seconds, rounded up",
           [](const MapView& m, L& l) {
             Duration d{l.retry_after_seconds * 1000};
             if (m.has("retry_after") && m.read_duration("retry_after", d)) {
               l.retry_after_seconds = static_cast<uint32_t>((d.count() + 999) / 1000);
             }
           },
           [](YAML::Emitter& e, const L& l) {
             e << YAML::Key << "retry_after" << YAML::Value << std::to_string(l.retry_after_seconds) + "s";
           }),
       F::duration("lifo_after", &L::lifo_after,
                   "adaptive LIFO: once the oldest waiter has waited this long, serve the newest first (`0` = always "
                   "FIFO)"),
       F::duration("shed_target", &L::shed_target, "adaptive shedding target delay (`0` = off)"),
       F::duration("shed_interval", &L::shed_interval,
                   "how long every delay sample must stay at or above the target before shedding starts")}};
  return t;
}

const Table<LoggingSection>& access_log_table() {
  using F = Fields<LoggingSection>;
  using L = LoggingSection;
  static const Table<LoggingSection> t{
      "logging.access_log",
      {F::flag("enabled", &L::access_log, "one line per request (`access_log: false` is short for this)"),
       F::text("path", &L::access_log_path, "`stdout`, or a file, reopened on `SIGUSR1`"),
       F::choice("format", &L::access_log_format, kLogFormats, "`text` or `json`")}};
  return t;
}

const Table<LoggingSection>& logging_table() {
  using F = Fields<LoggingSection>;
  using L = LoggingSection;
  std::vector<std::pair<std::string, std::string>> levels;
  for (const char* l : {"trace", "debug", "info", "warning", "error", "critical", "off"}) levels.emplace_back(l, l);
  static const Table<LoggingSection> t{
      "logging",
      {F::choice("level", &L::level, levels, "`trace debug info warning error critical off`"),
       F::choice("format", &L::format, kLogFormats,
                "event log format: `text` or `json` (stderr, i.e. journald under systemd)"),
       F::custom(
           "access_log",
           "one line per request: time, client, method, target, route, cluster, endpoint, status, bytes, duration, "
           "attempts, request id (and TLS fields on TLS listeners); `true`/`false`, or a mapping",
           [](const MapView& m, L& l) {
             const YAML::Node n = m.get("access_log");
             if (n.IsScalar()) m.read("access_log", l.access_log);
             else if (n.IsDefined()) access_log_table().read(m.ctx(), n, m.path("access_log"), l);
           },
           [](YAML::Emitter& e, const L& l) {
             e << YAML::Key << "access_log" << YAML::Value << YAML::BeginMap;
             access_log_table().emit(e, l);
             e << YAML::EndMap;
           })
           .shown("see `logging.access_log`"),
       F::number("queue_size", &L::queue_size, 16, 10'000'000,
                 "async log queue; when full the oldest line is dropped and counted "
                 "(`stealgate_log_lines_dropped_total`)")}};
  return t;
}

}  // namespace sg::config::detail
