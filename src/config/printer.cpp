// The effective configuration as YAML (every default resolved), in the input schema, so
// its output is itself a valid configuration file.
#include <yaml-cpp/yaml.h>

#include "config/loader.h"

namespace sg::config {

namespace {

std::string dur(Duration d) {
  auto ms = d.count();
  if (ms == 0) return "0";
  if (ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

const char* lb_name(LbPolicy p) {
  switch (p) {
    case LbPolicy::kRoundRobin: return "round_robin";
    case LbPolicy::kRandom: return "random";
    case LbPolicy::kLeastRequest: return "least_request";
    case LbPolicy::kRingHash: return "ring_hash";
  }
  return "round_robin";
}

const char* path_policy_name(http::PathPolicy p) {
  switch (p) {
    case http::PathPolicy::kNormalize: return "normalize";
    case http::PathPolicy::kReject: return "reject";
    case http::PathPolicy::kOff: return "off";
  }
  return "?";
}

const char* slash_policy_name(http::SlashPolicy p) {
  switch (p) {
    case http::SlashPolicy::kKeep: return "keep";
    case http::SlashPolicy::kReject: return "reject";
    case http::SlashPolicy::kDecode: return "decode";
  }
  return "?";
}

const char* retry_name(RetryOn r) {
  switch (r) {
    case RetryOn::kConnectFailure: return "connect_failure";
    case RetryOn::kReset: return "reset";
    case RetryOn::k5xx: return "5xx";
    case RetryOn::kGatewayError: return "gateway_error";
    case RetryOn::kTimeout: return "timeout";
  }
  return "connect_failure";
}

const char* fmt_name(LogFormat f) { return f == LogFormat::kJson ? "json" : "text"; }

void pairs(YAML::Emitter& e, const char* key, const std::vector<std::pair<std::string, std::string>>& kv) {
  if (kv.empty()) return;
  e << YAML::Key << key << YAML::Value << YAML::BeginMap;
  for (const auto& [k, v] : kv) e << YAML::Key << k << YAML::Value << v;
  e << YAML::EndMap;
}

void header_ops(YAML::Emitter& e, const char* key, const HeaderOps& ops) {
  if (ops.add.empty() && ops.set.empty() && ops.remove.empty()) return;
  e << YAML::Key << key << YAML::Value << YAML::BeginMap;
  pairs(e, "add", ops.add);
  pairs(e, "set", ops.set);
  if (!ops.remove.empty()) e << YAML::Key << "remove" << YAML::Value << YAML::Flow << ops.remove;
  e << YAML::EndMap;
}

template <class T>
void matchers(YAML::Emitter& e, const char* key, const std::vector<T>& ms) {
  if (ms.empty()) return;
  e << YAML::Key << key << YAML::Value << YAML::BeginSeq;
  for (const auto& m : ms) {
    e << YAML::BeginMap << YAML::Key << "name" << YAML::Value << m.name;
    if (m.value) e << YAML::Key << "value" << YAML::Value << *m.value;
    e << YAML::EndMap;
  }
  e << YAML::EndSeq;
}

}  // namespace

static void emit_runtime(YAML::Emitter& e, const RuntimeSection& r) {
  e << YAML::Key << "runtime" << YAML::Value << YAML::BeginMap;
  if (r.worker_threads == 0) e << YAML::Key << "worker_threads" << YAML::Value << "auto";
  else e << YAML::Key << "worker_threads" << YAML::Value << r.worker_threads;
  e << YAML::Key << "io_driver" << YAML::Value << io_driver_setting(r.io_driver);
  e << YAML::Key << "global_queue_interval" << YAML::Value << r.global_queue_interval;
  e << YAML::Key << "adaptive_global_queue_interval" << YAML::Value << r.adaptive_global_queue_interval;
  e << YAML::Key << "event_interval" << YAML::Value << r.event_interval;
  e << YAML::Key << "coop_budget" << YAML::Value << r.coop_budget;
  e << YAML::Key << "max_lifo_polls_per_tick" << YAML::Value << r.max_lifo_polls_per_tick;
  e << YAML::Key << "max_blocking_threads" << YAML::Value << r.max_blocking_threads;
  e << YAML::Key << "task_diagnostics" << YAML::Value << r.task_diagnostics;
  e << YAML::Key << "long_poll_threshold" << YAML::Value << dur(r.long_poll_threshold);
  e << YAML::EndMap;
}

void emit_listener_tls(YAML::Emitter& e, const ListenerTls& t) {
  e << YAML::Key << "tls" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "certificates" << YAML::Value << YAML::BeginSeq;
  for (const TlsCertificate& c : t.certificates) {
    e << YAML::BeginMap << YAML::Key << "cert" << YAML::Value << c.cert << YAML::Key << "key" << YAML::Value << c.key
      << YAML::EndMap;
  }
  e << YAML::EndSeq;
  e << YAML::Key << "min_version" << YAML::Value << (t.min_version == TlsVersion::k13 ? "1.3" : "1.2");
  e << YAML::Key << "ciphers" << YAML::Value << t.ciphers;
  e << YAML::Key << "ciphersuites" << YAML::Value << t.ciphersuites;
  e << YAML::Key << "alpn" << YAML::Value << YAML::Flow << t.alpn;
  e << YAML::Key << "session_tickets" << YAML::Value << t.session_tickets;
  e << YAML::Key << "ticket_key_rotation" << YAML::Value << dur(t.ticket_key_rotation);
  e << YAML::Key << "session_cache_size" << YAML::Value << t.session_cache_size;
  e << YAML::Key << "session_timeout" << YAML::Value << dur(t.session_timeout);
  e << YAML::Key << "handshake_timeout" << YAML::Value << dur(t.handshake_timeout);
  e << YAML::Key << "client_auth" << YAML::Value
    << (t.client_auth == ClientAuth::kRequired ? "required" : t.client_auth == ClientAuth::kOptional ? "optional" : "off");
  e << YAML::Key << "client_ca" << YAML::Value << t.client_ca;
  e << YAML::Key << "client_subject_header" << YAML::Value << t.client_subject_header;
  e << YAML::EndMap;
}

void emit_cluster_tls(YAML::Emitter& e, const ClusterTls& t) {
  e << YAML::Key << "tls" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "sni" << YAML::Value << t.sni;
  e << YAML::Key << "verify" << YAML::Value << t.verify;
  e << YAML::Key << "ca" << YAML::Value << t.ca;
  e << YAML::Key << "cert" << YAML::Value << t.cert;
  e << YAML::Key << "key" << YAML::Value << t.key;
  e << YAML::Key << "min_version" << YAML::Value << (t.min_version == TlsVersion::k13 ? "1.3" : "1.2");
  e << YAML::EndMap;
}

std::string to_yaml(const Config& c) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  emit_runtime(e, c.runtime);

  e << YAML::Key << "admin" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "enabled" << YAML::Value << c.admin.enabled;
  e << YAML::Key << "address" << YAML::Value << c.admin.address.text();
  e << YAML::EndMap;

  e << YAML::Key << "listeners" << YAML::Value << YAML::BeginSeq;
  for (const auto& l : c.listeners) {
    e << YAML::BeginMap;
    e << YAML::Key << "name" << YAML::Value << l.name;
    e << YAML::Key << "address" << YAML::Value << l.address.text();
    e << YAML::Key << "backlog" << YAML::Value << l.backlog;
    e << YAML::Key << "reuse_port" << YAML::Value << l.reuse_port;
    e << YAML::Key << "max_connections" << YAML::Value << l.max_connections;
    e << YAML::Key << "on_max_connections" << YAML::Value
      << (l.on_max_connections == OverflowAction::kBacklog ? "backlog" : "reject");
    e << YAML::Key << "header_timeout" << YAML::Value << dur(l.header_timeout);
    e << YAML::Key << "idle_timeout" << YAML::Value << dur(l.idle_timeout);
    e << YAML::Key << "body_timeout" << YAML::Value << dur(l.body_timeout);
    e << YAML::Key << "send_timeout" << YAML::Value << dur(l.send_timeout);
    e << YAML::Key << "max_target_bytes" << YAML::Value << l.max_target_bytes;
    e << YAML::Key << "max_header_bytes" << YAML::Value << l.max_header_bytes;
    e << YAML::Key << "max_headers" << YAML::Value << l.max_headers;
    e << YAML::Key << "max_body_bytes" << YAML::Value << l.max_body_bytes;
    e << YAML::Key << "path_normalization" << YAML::Value << path_policy_name(l.path.policy);
    e << YAML::Key << "escaped_slashes" << YAML::Value << slash_policy_name(l.path.escaped_slashes);
    e << YAML::Key << "backslashes" << YAML::Value << slash_policy_name(l.path.backslashes);
    if (l.tls) emit_listener_tls(e, *l.tls);
    e << YAML::EndMap;
  }
  e << YAML::EndSeq;

  e << YAML::Key << "limits" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "max_concurrent_requests" << YAML::Value << c.limits.max_concurrent_requests;
  e << YAML::Key << "max_queued_requests" << YAML::Value << c.limits.max_queued_requests;
  e << YAML::Key << "queue_timeout" << YAML::Value << dur(c.limits.queue_timeout);
  e << YAML::Key << "retry_after" << YAML::Value << std::to_string(c.limits.retry_after_seconds) + "s";
  e << YAML::Key << "lifo_after" << YAML::Value << dur(c.limits.lifo_after);
  e << YAML::Key << "shed_target" << YAML::Value << dur(c.limits.shed_target);
  e << YAML::Key << "shed_interval" << YAML::Value << dur(c.limits.shed_interval);
  e << YAML::EndMap;

  e << YAML::Key << "clusters" << YAML::Value << YAML::BeginSeq;
  for (const auto& cl : c.clusters) {
    e << YAML::BeginMap;
    e << YAML::Key << "name" << YAML::Value << cl.name;
    e << YAML::Key << "endpoints" << YAML::Value << YAML::BeginSeq;
    for (const auto& ep : cl.endpoints) {
      e << YAML::Flow << YAML::BeginMap << YAML::Key << "address" << YAML::Value << ep.address.text() << YAML::Key
        << "weight" << YAML::Value << ep.weight << YAML::EndMap;
    }
    e << YAML::EndSeq;
    e << YAML::Key << "lb" << YAML::Value << lb_name(cl.lb);
    if (!cl.hash_header.empty()) e << YAML::Key << "hash_header" << YAML::Value << cl.hash_header;
    e << YAML::Key << "connect_timeout" << YAML::Value << dur(cl.connect_timeout);
    e << YAML::Key << "max_idle_per_endpoint" << YAML::Value << cl.max_idle_per_endpoint;
    e << YAML::Key << "idle_timeout" << YAML::Value << dur(cl.idle_timeout);
    e << YAML::Key << "max_concurrent_requests" << YAML::Value << cl.max_concurrent_requests;
    if (cl.health_check.enabled) {
      const auto& h = cl.health_check;
      e << YAML::Key << "health_check" << YAML::Value << YAML::BeginMap;
      e << YAML::Key << "path" << YAML::Value << h.path;
      if (!h.host.empty()) e << YAML::Key << "host" << YAML::Value << h.host;
      e << YAML::Key << "interval" << YAML::Value << dur(h.interval);
      e << YAML::Key << "timeout" << YAML::Value << dur(h.timeout);
      e << YAML::Key << "healthy_threshold" << YAML::Value << h.healthy_threshold;
      e << YAML::Key << "unhealthy_threshold" << YAML::Value << h.unhealthy_threshold;
      e << YAML::Key << "expected_status" << YAML::Value
        << std::to_string(h.expected_status_min) + "-" + std::to_string(h.expected_status_max);
      e << YAML::EndMap;
    }
    e << YAML::Key << "outlier_detection" << YAML::Value << YAML::BeginMap;
    e << YAML::Key << "consecutive_failures" << YAML::Value << cl.outlier.consecutive_failures;
    e << YAML::Key << "base_ejection_time" << YAML::Value << dur(cl.outlier.base_ejection_time);
    e << YAML::Key << "max_ejection_time" << YAML::Value << dur(cl.outlier.max_ejection_time);
    e << YAML::Key << "max_ejection_percent" << YAML::Value << cl.outlier.max_ejection_percent;
    e << YAML::EndMap;
    if (cl.tls) emit_cluster_tls(e, *cl.tls);
    e << YAML::EndMap;
  }
  e << YAML::EndSeq;

  e << YAML::Key << "routes" << YAML::Value << YAML::BeginSeq;
  for (const auto& r : c.routes) {
    e << YAML::BeginMap;
    e << YAML::Key << "name" << YAML::Value << r.name;
    e << YAML::Key << "match" << YAML::Value << YAML::BeginMap;
    if (!r.match.host.empty()) e << YAML::Key << "host" << YAML::Value << r.match.host;
    if (!r.match.path_exact.empty()) e << YAML::Key << "path" << YAML::Value << r.match.path_exact;
    if (!r.match.path_prefix.empty()) e << YAML::Key << "path_prefix" << YAML::Value << r.match.path_prefix;
    if (!r.match.path_regex.empty()) e << YAML::Key << "path_regex" << YAML::Value << r.match.path_regex;
    if (!r.match.methods.empty()) e << YAML::Key << "methods" << YAML::Value << YAML::Flow << r.match.methods;
    matchers(e, "headers", r.match.headers);
    matchers(e, "query", r.match.query);
    if (!r.match.listeners.empty()) e << YAML::Key << "listener" << YAML::Value << YAML::Flow << r.match.listeners;
    e << YAML::EndMap;
    if (!r.cluster.empty()) e << YAML::Key << "cluster" << YAML::Value << r.cluster;
    if (r.direct_response) {
      e << YAML::Key << "direct_response" << YAML::Value << YAML::BeginMap;
      e << YAML::Key << "status" << YAML::Value << r.direct_response->status;
      e << YAML::Key << "body" << YAML::Value << r.direct_response->body;
      pairs(e, "headers", r.direct_response->headers);
      e << YAML::EndMap;
    }
    if (r.redirect) {
      e << YAML::Key << "redirect" << YAML::Value << YAML::BeginMap;
      e << YAML::Key << "status" << YAML::Value << r.redirect->status;
      e << YAML::Key << "location" << YAML::Value << r.redirect->location;
      e << YAML::EndMap;
    }
    if (!r.strip_prefix.empty() || !r.rewrite_path.empty() || !r.rewrite_host.empty()) {
      e << YAML::Key << "rewrite" << YAML::Value << YAML::BeginMap;
      if (!r.strip_prefix.empty()) e << YAML::Key << "strip_prefix" << YAML::Value << r.strip_prefix;
      if (!r.rewrite_path.empty()) e << YAML::Key << "path" << YAML::Value << r.rewrite_path;
      if (!r.rewrite_host.empty()) e << YAML::Key << "host" << YAML::Value << r.rewrite_host;
      e << YAML::EndMap;
    }
    header_ops(e, "request_headers", r.request_headers);
    header_ops(e, "response_headers", r.response_headers);
    e << YAML::Key << "timeout" << YAML::Value << dur(r.timeout);
    e << YAML::Key << "retries" << YAML::Value << YAML::BeginMap;
    e << YAML::Key << "attempts" << YAML::Value << r.retries.attempts;
    std::vector<std::string> on;
    for (auto o : r.retries.on) on.push_back(retry_name(o));
    e << YAML::Key << "on" << YAML::Value << YAML::Flow << on;
    e << YAML::Key << "budget_percent" << YAML::Value << r.retries.budget_percent;
    e << YAML::Key << "min_retry_concurrency" << YAML::Value << r.retries.min_retry_concurrency;
    e << YAML::EndMap;
    e << YAML::Key << "max_concurrent_requests" << YAML::Value << r.max_concurrent_requests;
    e << YAML::Key << "upgrades" << YAML::Value << YAML::Flow << r.upgrades;
    e << YAML::EndMap;
  }
  e << YAML::EndSeq;

  e << YAML::Key << "logging" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "level" << YAML::Value << c.logging.level;
  e << YAML::Key << "format" << YAML::Value << fmt_name(c.logging.format);
  e << YAML::Key << "queue_size" << YAML::Value << c.logging.queue_size;
  e << YAML::Key << "access_log" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "enabled" << YAML::Value << c.logging.access_log;
  e << YAML::Key << "path" << YAML::Value << c.logging.access_log_path;
  e << YAML::Key << "format" << YAML::Value << fmt_name(c.logging.access_log_format);
  e << YAML::EndMap;
  e << YAML::EndMap;
  e << YAML::Key << "drain_timeout" << YAML::Value << dur(c.drain_timeout);
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace sg::config
