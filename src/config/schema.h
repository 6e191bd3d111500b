// The typed configuration: what stealgate.yaml means once parsed, validated and with every
// default resolved. A Config is immutable once loaded; the running gateway holds it as
// std::shared_ptr<const Config> and a reload swaps in a new one. Field defaults below are
// the documented defaults (config/README.md mirrors them).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "http/path.h"
#include "routing/address_block.h"

namespace sg::config {

using Duration = std::chrono::milliseconds;

struct Address {
  std::string host;  // literal IP address or name ("localhost"); IPv6 without brackets
  uint16_t port = 0;
  std::string text() const;  // host:port, [v6]:port
};

enum class IoDriver { kAuto, kIoUring, kEpoll };
// The setting's word as the file spells it: "auto", "io_uring", "epoll".
inline const char* io_driver_setting(IoDriver d) {
  return d == IoDriver::kIoUring ? "io_uring" : d == IoDriver::kEpoll ? "epoll" : "auto";
}

struct RuntimeSection {
  std::size_t worker_threads = 0;  // 0 = auto: CPUs available to the process
  IoDriver io_driver = IoDriver::kAuto;  // auto: io_uring where the kernel allows it, else epoll
  uint32_t global_queue_interval = 61;
  bool adaptive_global_queue_interval = false;
  uint32_t event_interval = 61;
  uint32_t coop_budget = 128;
  uint32_t max_lifo_polls_per_tick = 3;
  std::size_t max_blocking_threads = 512;
  bool task_diagnostics = true;           // per-task records for /debug/tasks
  Duration long_poll_threshold{10};       // a poll this long is counted and logged
  uint32_t driver_visit_after_poll_us = 100;  // a poll this long is followed by a driver poll
  bool yield_between_batches = true;      // yield the CPU before taking the driver's completions
  Duration idle_memory_reclaim{1000};     // a worker idle this long gives cached memory back
  bool operator==(const RuntimeSection&) const = default;
};

struct AdminSection {
  bool enabled = true;
  Address address{"127.0.0.1", 9901};
};

enum class OverflowAction { kReject503, kBacklog };

// A setting that is on, off, or decided case by case (`auto`).
enum class AutoFlag { kAuto, kOn, kOff };

// TLS termination on a listener (tls/server_context.h builds it).
struct TlsCertificate {
  std::string cert;  // PEM: the leaf first, then its chain
  std::string key;   // PEM private key
  bool operator==(const TlsCertificate&) const = default;
};
enum class TlsVersion { k12, k13 };
enum class ClientAuth { kOff, kOptional, kRequired };
struct ListenerTls {
  // SNI picks the certificate whose names (subjectAltName DNS entries, else the subject's
  // CN) match the requested name exactly, then by wildcard; the first is the default.
  std::vector<TlsCertificate> certificates;
  TlsVersion min_version = TlsVersion::k12;
  std::string ciphers;        // TLS 1.2 cipher list (OpenSSL syntax); "" = OpenSSL's default
  std::string ciphersuites;   // TLS 1.3 suites; "" = OpenSSL's default
  std::vector<std::string> alpn{"http/1.1"};
  bool session_tickets = true;
  Duration ticket_key_rotation{3'600'000};  // a new ticket key this often; two old ones still accepted
  std::size_t tickets_per_handshake = 1;    // TLS 1.3 tickets sent after a full handshake
  std::size_t session_cache_size = 20'000;  // server-side session cache (0 = off)
  Duration session_timeout{300'000};        // how long a session may be resumed
  Duration handshake_timeout{10'000};
  ClientAuth client_auth = ClientAuth::kOff;
  std::string client_ca;  // PEM CA certificates that client certificates must chain to
  // The verified client certificate's subject goes upstream in this header (a client's own
  // header of that name is always removed).
  std::string client_subject_header = "X-Client-Cert-Subject";
};

struct ListenerSection {
  std::string name;
  Address address;
  int backlog = 1024;
  // A listening socket per worker (SO_REUSEPORT) or one; `auto`: one per worker for plain
  // HTTP, on an address no other socket holds, and one for TLS (proxy/gateway.cpp).
  AutoFlag reuse_port = AutoFlag::kAuto;
  std::size_t max_connections = 10000;
  OverflowAction on_max_connections = OverflowAction::kReject503;
  Duration header_timeout{10'000};   // first byte to end of request head
  Duration idle_timeout{60'000};     // keep-alive wait for the next request
  Duration body_timeout{30'000};     // between reads of a request body
  Duration send_timeout{30'000};     // between writes to a slow client
  // At least as wide as nginx's and HAProxy's defaults for ordinary traffic: a request line
  // of 16 KiB (HAProxy's buffer; nginx's is 8 KiB), 32 KiB of header section (nginx's 4 x
  // 8 KiB; HAProxy's 16 KiB buffer), no count that those sizes would not hit first.
  std::size_t max_target_bytes = 16 * 1024;
  std::size_t max_header_bytes = 32 * 1024;
  std::size_t max_headers = 256;
  // How the request path is normalized before routing (http/path.h).
  http::PathOptions path;
  uint64_t max_body_bytes = 64ull * 1024 * 1024;  // 0 = unlimited
  std::optional<ListenerTls> tls;  // absent: plain HTTP
  bool proxy_protocol = false;     // every connection starts with a PROXY header (io/proxy_protocol.h)
  // Proxies whose X-Forwarded-For names the client (proxy/client_address.h): as written,
  // and parsed at load.
  std::vector<std::string> trusted_proxies;
  std::vector<routing::AddressBlock> trusted_proxy_blocks;
};

struct LimitsSection {
  std::size_t max_concurrent_requests = 10000;  // 0 = unlimited
  std::size_t max_queued_requests = 1000;
  Duration queue_timeout{100};
  uint32_t retry_after_seconds = 1;
  // Adaptive LIFO (exec/semaphore.h): once the oldest queued request has waited this long,
  // queues serve the newest first and a full queue pushes out its oldest. 0 = always FIFO.
  Duration lifo_after{0};
  // Adaptive shedding: refuse new requests while the executor's scheduling delay stays
  // above `target` for `interval` (CoDel-style). 0 = off.
  Duration shed_target{0};
  Duration shed_interval{100};
};

enum class LbPolicy { kRoundRobin, kRandom, kLeastRequest, kRingHash };

struct EndpointSection {
  Address address;
  uint32_t weight = 1;
};

struct HealthCheckSection {
  bool enabled = false;
  std::string path = "/healthz";
  std::string host;  // Host header; default: the endpoint address
  Duration interval{5'000};
  Duration timeout{1'000};
  uint32_t healthy_threshold = 2;
  uint32_t unhealthy_threshold = 3;
  int expected_status_min = 200;
  int expected_status_max = 399;
};

struct OutlierSection {
  uint32_t consecutive_failures = 5;  // failed attempts in a row (upstream/cluster.h); 0 = off
  Duration base_ejection_time{30'000};
  Duration max_ejection_time{300'000};
  uint32_t max_ejection_percent = 50;
};

// TLS to a cluster's endpoints (tls/client_context.h).
struct ClusterTls {
  std::string sni;   // the name sent and verified; "" = the endpoint's host (an IP literal: no SNI, IP verified)
  bool verify = true;
  std::string ca;    // PEM CAs to trust; "" = the system's store
  std::string cert;  // client certificate (PEM chain) and its key, when the upstream asks for one
  std::string key;
  TlsVersion min_version = TlsVersion::k12;
  bool operator==(const ClusterTls&) const = default;
};

struct ClusterSection {
  std::string name;
  std::vector<EndpointSection> endpoints;
  LbPolicy lb = LbPolicy::kRoundRobin;
  std::string hash_header;  // ring_hash key: this request header; empty = client address
  Duration connect_timeout{1'000};
  std::size_t max_idle_per_endpoint = 1024;
  Duration idle_timeout{60'000};
  Duration dns_refresh{30'000};  // resolve endpoint names again this often (proxy/dns_refresh.cpp); 0 = off
  std::size_t max_concurrent_requests = 0;  // 0 = no per-cluster limit
  HealthCheckSection health_check;
  OutlierSection outlier;
  std::optional<ClusterTls> tls;  // absent: plain HTTP to the endpoints
};

struct HeaderMatch {
  std::string name;
  std::optional<std::string> value;  // absent: presence only
};

struct QueryMatch {
  std::string name;
  std::optional<std::string> value;
};

struct RouteMatchSection {
  std::string host;         // exact, or "*.example.com"; empty = any (port ignored)
  std::string path_exact;
  std::string path_prefix;
  std::string path_regex;   // ECMAScript, whole-path match
  bool case_sensitive = true;  // false: the path matchers ignore ASCII case
  std::vector<std::string> methods;
  std::vector<HeaderMatch> headers;
  std::vector<QueryMatch> query;
  std::vector<std::string> listeners;  // empty = every listener
  std::vector<std::string> sources;    // client address blocks; empty = any client
};

struct HeaderOps {
  std::vector<std::pair<std::string, std::string>> add;
  std::vector<std::pair<std::string, std::string>> set;
  std::vector<std::string> remove;
};

struct DirectResponseSection {
  int status = 200;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

struct RedirectSection {
  int status = 302;
  std::string location;
};

enum class RetryOn { kConnectFailure, kReset, k5xx, kGatewayError, kTimeout };

struct RetrySection {
  uint32_t attempts = 0;  // retries after the first try
  std::vector<RetryOn> on{RetryOn::kConnectFailure};
  uint32_t budget_percent = 20;  // of active requests
  uint32_t min_retry_concurrency = 3;
};

// routes[].rate_limit (proxy/rate_limit.h).
struct RateLimitSection {
  std::string rate;                 // "100/s", "6000/m", "50000/h"
  uint64_t burst = 0;               // requests beyond the rate at once (resolved at load)
  std::string key = "client_ip";    // client_ip | route | header:NAME
  uint64_t max_keys = 100'000;      // keys tracked at once
  // From `rate`, at load: `count` requests per `per`.
  uint64_t count = 0;
  Duration per{0};
  bool operator==(const RateLimitSection&) const = default;
};

struct RouteSection {
  std::string name;
  RouteMatchSection match;
  // Exactly one action.
  std::string cluster;
  std::optional<DirectResponseSection> direct_response;
  std::optional<RedirectSection> redirect;
  std::string strip_prefix;
  std::string rewrite_path;   // replaces the whole path
  std::string rewrite_host;
  HeaderOps request_headers;
  HeaderOps response_headers;
  Duration timeout{15'000};   // upstream response (first byte of the response head)
  RetrySection retries;
  std::size_t max_concurrent_requests = 0;
  // Request body bytes read before admission and before an upstream is picked (0: the
  // body streams as it arrives); proxy/request_body.h.
  std::size_t request_buffering = 0;
  // Upgrade protocols forwarded (lower-case names, no version); any other is dropped and
  // the request goes upstream as plain HTTP/1.1 (h2c smuggling).
  std::vector<std::string> upgrades{"websocket"};
  std::optional<RateLimitSection> rate_limit;
};

enum class LogFormat { kText, kJson };

struct LoggingSection {
  std::string level = "info";
  LogFormat format = LogFormat::kText;
  bool access_log = true;
  std::string access_log_path = "stdout";  // or a file path (reopened on SIGUSR1)
  LogFormat access_log_format = LogFormat::kText;
  std::size_t queue_size = 8192;           // async log queue; full = lines dropped and counted
};

struct Config {
  std::string source;  // file it was loaded from
  RuntimeSection runtime;
  AdminSection admin;
  std::vector<ListenerSection> listeners;
  LimitsSection limits;
  std::vector<ClusterSection> clusters;
  std::vector<RouteSection> routes;
  LoggingSection logging;
  Duration drain_timeout{30'000};  // graceful shutdown bound
  Duration drain_idle_grace{0};    // how long a drain leaves idle keep-alive connections open

  const ClusterSection* find_cluster(const std::string& name) const;
};

}  // namespace sg::config
