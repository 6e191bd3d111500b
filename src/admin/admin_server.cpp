#include "admin/admin_server.h"


#include "admin/debug_tasks.h"
#include "admin/scheduler_page.h"
#include "config/loader.h"
#include "exec/runtime.h"
#include "http/headers.h"
#include "http/serialize.h"
#include "http/stream.h"
#include "metrics/exporter.h"
#include "proxy/local_reply.h"
#include "upstream/cluster.h"

namespace sg::admin {

namespace {

using namespace std::chrono_literals;

// Values of keys whose names suggest credentials (Authorization, Cookie, *token*,
// *secret*, *password*, api key) are replaced in /config. Works line by line on the
// emitted YAML: "<indent>[- ]key: value".
std::string redact(const std::string& yaml) {
  static const char* kMarkers[] = {"authorization", "cookie", "token", "secret", "password", "apikey", "api-key",
                                   "api_key"};
  std::string out;
  out.reserve(yaml.size());
  std::size_t start = 0;
  while (start < yaml.size()) {
    std::size_t end = yaml.find('\n', start);
    if (end == std::string::npos) end = yaml.size();
    std::string line = yaml.substr(start, end - start);
    std::size_t colon = line.find(": ");
    if (colon != std::string::npos) {
      std::string key = http::to_lower(line.substr(0, colon));
      for (const char* m : kMarkers) {
        if (key.find(m) != std::string::npos) {
          line = line.substr(0, colon + 2) + "<redacted>";
          break;
        }
      }
    }
    out += line;
    if (end < yaml.size()) out += '\n';
    start = end + 1;
  }
  return out;
}

std::string respond(int status, std::string body, std::string type, bool head) {
  http::HeaderMap h;
  h.add("Date", std::string(http::http_date_now()));
  h.add("Content-Type", std::move(type));
  h.add("Content-Length", std::to_string(body.size()));
  h.add("Cache-Control", "no-store");
  std::string out;
  http::append_response_head(out, 1, status, {}, h);
  if (!head) out += body;
  return out;
}

exec::Task<void> serve_admin(proxy::Gateway& gw, io::Stream s) {
  http::ParserLimits lim;
  http::MessageReader reader(s, http::Parser::Mode::kRequest, lim);
  for (;;) {
    auto hr = co_await reader.read_head(io::Deadline::after(30s), 10s);
    if (hr.status != http::ReadStatus::kOk) {
      if (hr.status == http::ReadStatus::kParseError) {
        proxy::LocalReply lr;
        lr.status = reader.parser().error_status();
        lr.close = true;
        std::string bytes = proxy::render_local_reply(lr);
        co_await s.write_all(bytes, io::Deadline::after(5s));
      }
      break;
    }
    auto& req = reader.parser().request();
    // Admin requests carry no body worth reading; drain a small one.
    bool has_body = req.body != http::BodyKind::kNone;
    std::optional<metrics::ProcessStats> process;
    if (req.path == "/metrics") {
      // Listing /proc/self/fd takes milliseconds with thousands of connections (8 ms at
      // 10k): on the blocking pool, not on a worker.
      auto read = [workers = gw.runtime().exec().worker_thread_ids()] { return metrics::read_process_stats(workers); };
      if (auto r = co_await exec::spawn_blocking(std::move(read))) process = *r;
    }
    std::string out = admin_response(gw, req.method, req.path, req.is_head(), req.query, process);
    if (co_await s.write_all(out, io::Deadline::after(10s))) break;
    if (has_body || !req.keep_alive) break;
    auto fin = co_await reader.read_body(io::Deadline::after(1s));  // completes the message
    if (fin.status != http::ReadStatus::kOk || !fin.done) break;
  }
  s.close();
}

exec::Task<void> admin_accept(proxy::Gateway& gw, std::shared_ptr<io::TcpListener> l) {
  for (;;) {
    auto c = co_await l->accept();
    if (!c.ok()) {
      if (!l->is_open()) co_return;
      co_await io::sleep_for(50ms);
      continue;
    }
    exec::spawn_detached(serve_admin(gw, io::Stream(std::move(*c))), {exec::TaskKind::kAdmin, "admin client"});
  }
}

}  // namespace

std::string admin_response(proxy::Gateway& gw, const std::string& method, const std::string& path, bool head,
                           std::string_view query, const std::optional<metrics::ProcessStats>& process) {
  if (method != "GET" && method != "HEAD") {
    return respond(405, "method not allowed\n", "text/plain; charset=utf-8", head);
  }
  if (path == "/metrics") {
    return respond(200, metrics::render(gw, process), "text/plain; version=0.0.4; charset=utf-8", head);
  }
  if (path == "/healthz") return respond(200, "ok\n", "text/plain; charset=utf-8", head);
  if (path == "/ready") {
    if (gw.ready()) return respond(200, "ready\n", "text/plain; charset=utf-8", head);
    return respond(503, gw.draining() ? "draining\n" : "starting\n", "text/plain; charset=utf-8", head);
  }
  if (path == "/config") {
    auto snap = gw.snapshot();
    if (!snap) return respond(503, "no configuration loaded\n", "text/plain; charset=utf-8", head);
    return respond(200, redact(config::to_yaml(*snap->config)), "application/yaml; charset=utf-8", head);
  }
  if (path == "/debug/tasks") {
    return respond(200, debug_tasks_json(gw.runtime(), task_limit_of(query)), "application/json", head);
  }
  if (path == "/debug/scheduler") {
    return respond(200, std::string(scheduler_page()), "text/html; charset=utf-8", head);
  }
  return respond(404, "not found; try /metrics /healthz /ready /config /debug/tasks /debug/scheduler\n",
                 "text/plain; charset=utf-8", head);
}

std::string AdminServer::start(const config::Address& addr) {
  std::string err;
  auto ep = upstream::resolve(addr, err);
  if (!ep.ok()) return "admin " + addr.text() + ": " + err;
  io::Listening got = io::listen_on(gw_.runtime().context(), gw_.inherited(), "admin", *ep, {});
  if (!got.listener) return "admin endpoint " + addr.text() + ": " + got.error;
  port_ = got.listener->local_endpoint().port();
  inherited_ = got.inherited;
  listener_ = std::make_shared<io::TcpListener>(std::move(*got.listener));
  task_ = gw_.runtime().handle().spawn(admin_accept(gw_, listener_),
                                       {exec::TaskKind::kAdmin, "admin listener " + addr.text()});
  return "";
}

void AdminServer::stop() {
  if (task_.valid()) {
    task_.cancel();
    task_.wait();
    task_ = {};
  }
  if (!listener_) return;
  // What the ring took, or the kernel queued, as the accepting stopped is answered here:
  // after a binary upgrade the socket lives on in the new process, which would not hear of
  // those (io::TcpListener::stop_accepting).
  auto serve_taken = [](proxy::Gateway& gw, std::shared_ptr<io::TcpListener> l) -> exec::Task<void> {
    for (auto& c : co_await l->stop_accepting()) {
      exec::spawn_detached(serve_admin(gw, io::Stream(std::move(c.stream))), {exec::TaskKind::kAdmin, "admin client"});
    }
  };
  gw_.runtime().handle().spawn(serve_taken(gw_, listener_), {exec::TaskKind::kAdmin, "admin listener"}).wait();
  listener_->close();
  listener_.reset();
}

}  // namespace sg::admin
