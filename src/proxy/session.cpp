// The downstream side: the keep-alive loop of a connection, and what happens to each
// request before and after the upstream exchange (routing, local replies, admission,
// access log, metrics).
#include "proxy/session.h"

#include <cerrno>
#include <cstdint>

#include "common/log.h"
#include "exec/fast_rand.h"
#include "http/serialize.h"
#include "io/wait.h"
#include "proxy/exchange.h"
#include "proxy/headers.h"
#include "proxy/local_reply.h"

namespace sg::proxy {

namespace {

using namespace std::chrono_literals;

http::ParserLimits parser_limits(const config::ListenerSection& l) {
  http::ParserLimits p;
  p.max_target_bytes = l.max_target_bytes;
  p.max_header_bytes = l.max_header_bytes;
  p.max_headers = l.max_headers;
  p.max_body_bytes = l.max_body_bytes;
  return p;
}

std::string endpoint_text(const io::tcp::endpoint& ep) {
  std::string ip = ep.address().to_string();
  return ep.address().is_v6() ? "[" + ip + "]:" + std::to_string(ep.port()) : ip + ":" + std::to_string(ep.port());
}

// The access log's TLS fields: version, cipher, the requested name, resumption, and the
// verified client certificate's subject.
std::string tls_json(const io::TlsSummary& t) {
  std::string out = ",\"tls\":{\"version\":" + log::json_quote(t.version) + ",\"cipher\":" + log::json_quote(t.cipher) +
                    ",\"sni\":" + log::json_quote(t.sni) + ",\"resumed\":" + (t.resumed ? "true" : "false");
  if (!t.peer_subject.empty()) out += ",\"client_subject\":" + log::json_quote(t.peer_subject);
  return out + "}";
}

std::string tls_text(const io::TlsSummary& t) {
  std::string out = " tls=" + std::string(t.version) + " sni=" + (t.sni.empty() ? "-" : t.sni) +
                    (t.resumed ? " resumed" : "");
  if (!t.peer_subject.empty()) out += " client=\"" + t.peer_subject + "\"";
  return out;
}

void write_access_log(const RequestContext& c, const http::RequestHead& req, uint64_t duration_us) {
  auto logger = log::access();
  if (!logger) return;
  if (log::access_json()) {
    logger->info(
        R"("client":{},"method":{},"target":{},"route":{},"cluster":{},"endpoint":{},"status":{},"bytes_in":{},"bytes_out":{},"duration_ms":{:.3f},"attempts":{},"request_id":{}{}{}}})",
        log::json_quote(c.client), log::json_quote(req.method), log::json_quote(req.target),
        log::json_quote(c.route), log::json_quote(c.cluster), log::json_quote(c.endpoint), c.status, c.bytes_in,
        c.bytes_out, static_cast<double>(duration_us) / 1000.0, c.attempts, log::json_quote(c.request_id),
        c.tls == nullptr ? std::string() : tls_json(*c.tls),
        c.note.empty() ? std::string() : ",\"note\":" + log::json_quote(c.note));
  } else {
    logger->info("{} \"{} {} HTTP/1.{}\" {} {} route={} cluster={} endpoint={} {:.3f}ms attempts={} id={}{}{}{}",
                 c.client, req.method, req.target, req.version_minor, c.status, c.bytes_out,
                 c.route, c.cluster, c.endpoint, static_cast<double>(duration_us) / 1000.0, c.attempts, c.request_id,
                 c.tls == nullptr ? std::string() : tls_text(*c.tls),
                 c.note.empty() ? "" : " note=\"", c.note.empty() ? "" : c.note + "\"");
  }
}

// Waits in an admission queue while watching the client: a client that disconnects while
// queued leaves the queue (its wait ends as a timeout that the caller recognises).
class QueueWait final : public exec::WaitTimeout {
 public:
  QueueWait(io::Deadline dl, io::Stream& client) : dl_(dl), client_(client) {}
  void arm(exec::Waker w) override {
    io::arm_deadline(timer_, dl_, w.clone());
    client_wait_.start(client_.tcp().socket(), io::Interest::kRead, std::move(w), io::kTagReady);
  }
  void cancel() override {
    timer_.cancel();
    client_wait_.cancel();
  }

 private:
  io::Deadline dl_;
  exec::TimerEntry timer_;
  io::ReadyWait client_wait_;
  io::Stream& client_;
};

// A queue wait ends between 80% and 100% of queue_timeout, drawn per request. Requests
// that queued together (a burst, or closed-loop clients that were refused together and
// came straight back) would otherwise all time out in the same instant and return as one
// wave again; the spread dissolves such waves within a few cycles.
io::Clock::duration jittered_queue_timeout(io::Clock::duration timeout) {
  thread_local exec::FastRand rand(static_cast<uint32_t>(io::Clock::now().time_since_epoch().count()));
  // Drawn in microseconds: a fifth of any sane timeout fits in 32 bits (up to ~71 min).
  const auto spread = std::chrono::duration_cast<std::chrono::microseconds>(timeout) / 5;
  if (spread.count() <= 0 || spread.count() > UINT32_MAX) return timeout;
  return timeout - std::chrono::microseconds(rand.below(static_cast<uint32_t>(spread.count())));
}

enum class Admit { kAdmitted, kQueueFull, kDisplaced, kTimeout, kShed, kClientGone };

// Takes a permit from `sem` (if any), waiting in its queue until `queue_timeout`; while
// `shedding`, refuses instead of waiting (see proxy/load_shedder.h).
exec::Task<Admit> admit(exec::Semaphore* sem, exec::Semaphore::Permit& permit,
                        io::Stream& client, io::Clock::duration queue_timeout, bool shedding,
                        AdmissionStats& st) {
  if (sem == nullptr) co_return Admit::kAdmitted;
  if (sem->try_acquire()) {
    permit = exec::Semaphore::Permit(sem);
    co_return Admit::kAdmitted;
  }
  if (shedding) co_return Admit::kShed;
  auto t0 = exec::tick_now();
  io::Deadline dl{t0 + jittered_queue_timeout(queue_timeout)};
  bool watch_client = true;
  st.queued.fetch_add(1, std::memory_order_relaxed);
  Admit out = Admit::kTimeout;
  for (;;) {
    exec::AcquireStatus s;
    if (watch_client) {
      QueueWait w(dl, client);
      s = co_await sem->acquire(&w);
    } else {
      io::DeadlineTimeout w(dl);
      s = co_await sem->acquire(&w);
    }
    if (s == exec::AcquireStatus::kAcquired) {
      permit = exec::Semaphore::Permit(sem);
      out = Admit::kAdmitted;
      break;
    }
    if (s == exec::AcquireStatus::kQueueFull || s == exec::AcquireStatus::kDisplaced) {
      out = s == exec::AcquireStatus::kQueueFull ? Admit::kQueueFull : Admit::kDisplaced;
      break;
    }
    if (dl.expired()) break;  // queue timeout
    // Woken early: the client closed, or sent more bytes (pipelining): keep waiting.
    if (client.peer_closed()) {
      out = Admit::kClientGone;
      break;
    }
    watch_client = false;
  }
  st.queued.fetch_sub(1, std::memory_order_relaxed);
  st.wait.observe(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(exec::tick_now() - t0).count()));
  co_return out;
}

// Who is on the other end of a downstream connection.
struct Peer {
  std::string address;  // ip:port
  std::string ip;
  std::optional<io::TlsSummary> tls;  // on TLS listeners, what the handshake agreed on
};

// The TLS handshake of a new connection on a TLS listener; counts its outcome.
exec::Task<bool> accept_tls(ListenerState& ls, const tls::ServerContext& tc, io::Stream& client,
                            const std::string& peer) {
  std::error_code ec =
      co_await client.accept_tls(tc.default_ctx(), io::Deadline::after(tc.config().handshake_timeout));
  io::TlsLayer* t = client.tls();
  if (!ec) {
    io::TlsSummary s = t->summary();
    ls.stats.tls_handshakes[tls_version_index(s.version)][s.resumed ? 1 : 0].fetch_add(1, std::memory_order_relaxed);
    co_return true;
  }
  const std::string_view kind = t != nullptr ? t->failure_kind() : std::string_view("other");
  ls.stats.tls_failures[tls_failure_index(kind)].fetch_add(1, std::memory_order_relaxed);
  SG_LOG_DEBUG("listener {}: TLS handshake with {} failed: {} ({})", ls.address, peer,
               t != nullptr ? t->reason() : ec.message(), kind);
  if (kind == "not_tls") {
    // A plain HTTP request on a TLS port gets a readable answer instead of a TLS alert (as
    // nginx does), in plain HTTP on the raw connection.
    LocalReply lr;
    lr.status = 400;
    lr.close = true;
    lr.body = "This port speaks HTTPS: use https://\n";
    std::string bytes = render_local_reply(lr);
    co_await client.tcp().write_all(bytes, io::Deadline::after(1s));
  }
  co_return false;
}

struct Handled {
  bool keep_alive = false;
};

exec::Task<Handled> handle_request(Gateway& gw, const std::shared_ptr<const Snapshot>& snap,
                                   const config::ListenerSection& lcfg, io::Stream& client,
                                   http::MessageReader& reader, RequestContext& ctx) {
  http::RequestHead& req = reader.parser().request();
  GatewayStats& gs = gw.stats();
  gs.downstream_requests.fetch_add(1, std::memory_order_relaxed);
  ctx.request_id = request_id_for(req);

  const bool has_body = req.body != http::BodyKind::kNone;
  // Takes a reference: class-type temporaries must not be passed by value into coroutines
  // (see exec/coro.h). ctx.note is set by the caller.
  auto local = [&](LocalReply& lr) -> exec::Task<Handled> {
    lr.minor = 1;
    lr.head = req.is_head();
    // The unread request body makes the connection unusable: close after replying.
    lr.close = lr.close || has_body || !req.keep_alive || req.is_http10() || gw.draining();
    ctx.status = lr.status;
    if (!lr.head) ctx.bytes_out = lr.body.size();
    gs.local_replies.fetch_add(1, std::memory_order_relaxed);
    std::string bytes = render_local_reply(lr);
    bool ok = co_await send_local(client, bytes, lcfg);
    co_return Handled{ok && !lr.close};
  };

  const routing::CompiledRoute* route = snap->routes.match(req, lcfg.name);
  if (route == nullptr) {
    LocalReply lr;
    lr.status = 404;
    ctx.note = "no route";
    co_return co_await local(lr);
  }
  ctx.route = route->cfg->name;
  ctx.route_index = static_cast<int>(route->index);
  const config::RouteSection& r = *route->cfg;

  if (r.direct_response) {
    LocalReply lr;
    lr.status = r.direct_response->status;
    lr.body = r.direct_response->body;
    lr.headers = r.direct_response->headers;
    co_return co_await local(lr);
  }
  if (r.redirect) {
    LocalReply lr;
    lr.status = r.redirect->status;
    lr.headers.emplace_back("Location", r.redirect->location);
    co_return co_await local(lr);
  }

  // Admission: global, then route, then cluster. Rejections never touch an upstream.
  const auto& lim = snap->config->limits;
  AdmissionStats& ast = gs.admission;
  exec::Semaphore::Permit permits[3];  // global, route, cluster
  exec::Semaphore::Permit &global = permits[0], &per_route = permits[1], &per_cluster = permits[2];
  struct Level {
    exec::Semaphore* sem;
    exec::Semaphore::Permit* permit;
    Scope scope;
  };
  auto cl_it = snap->cluster_limits.find(route->cluster->name());
  Level levels[] = {
      {snap->global_limit.get(), &global, Scope::kGlobal},
      {snap->route_limits[route->index].get(), &per_route, Scope::kRoute},
      {cl_it == snap->cluster_limits.end() ? nullptr : cl_it->second.get(), &per_cluster, Scope::kCluster},
  };
  LoadShedder& shedder = gw.shedder();
  const bool shedding = shedder.shedding();
  const auto admission_start = exec::tick_now();
  bool limited = false;
  for (const Level& lv : levels) {
    limited = limited || lv.sem != nullptr;
    Admit a = co_await admit(lv.sem, *lv.permit, client, lim.queue_timeout, shedding, ast);
    if (a == Admit::kAdmitted) continue;
    if (a == Admit::kClientGone) {
      ctx.note = "client closed while queued";
      co_return Handled{false};
    }
    RejectReason why = a == Admit::kQueueFull || a == Admit::kDisplaced ? RejectReason::kQueueFull
                       : a == Admit::kShed    ? RejectReason::kShed
                                              : RejectReason::kQueueTimeout;
    if (why == RejectReason::kShed) shedder.note_refused(exec::tick_now());
    ast.reject(lv.scope, why);
    LocalReply lr;
    lr.status = 503;
    lr.headers.emplace_back("Retry-After", std::to_string(lim.retry_after_seconds));
    ctx.note = a == Admit::kDisplaced               ? "pushed out of a full admission queue by a newer request"
               : why == RejectReason::kQueueFull ? "admission queue full"
               : why == RejectReason::kShed    ? "shed (standing admission queue or scheduling delay)"
                                               : "admission queue timeout";
    co_return co_await local(lr);
  }
  if (limited) {
    // The admitted request's queue sojourn (0 when every permit was free) drives the
    // shedder's standing-queue detector.
    auto now = exec::tick_now();
    shedder.sojourn.observe(now - admission_start, now);
  }
  // Admitted: until its response is done, this task's wake-ups go ahead of new requests
  // (the priority lane, exec/context.h), so that under overload the permits cycle at the
  // upstream's pace instead of waiting behind the run queue.
  exec::set_current_task_priority(true);

  Downstream down{client, reader, lcfg, gw.draining(), permits};
  ForwardResult fr = co_await forward(gw, *snap, *route, down, ctx);
  co_return Handled{fr.client_reusable};
}

// Answers a request that cannot be served (malformed, too slow, a refused path) and logs
// it; the connection is closed after it.
exec::Task<void> refuse_request(Gateway& gw, const Snapshot& snap, const config::ListenerSection& lcfg,
                                io::Stream& client, int status, const std::string& note, const std::string& peer) {
  LocalReply lr;
  lr.status = status;
  lr.close = true;
  gw.stats().local_replies.fetch_add(1, std::memory_order_relaxed);
  std::string bytes = render_local_reply(lr);
  co_await send_local(client, bytes, lcfg);
  snap.unrouted_stats->count("OTHER", status, 0);
  if (auto l = log::access()) {
    if (log::access_json()) {
      l->info(R"("client":{},"status":{},"note":{}}})", log::json_quote(peer), status, log::json_quote(note));
    } else {
      l->info("{} \"-\" {} 0 note=\"{}\"", peer, status, note);
    }
  }
}

// Normalizes the path and authority that routing will see (and the path that goes
// upstream), by the listener's policy (http/path.h); counts what it did. Returns why the
// request must be refused (400), or "".
std::string normalize_request(http::RequestHead& req, const http::PathOptions& opt, ListenerStats& st) {
  if (opt.policy == http::PathPolicy::kOff || req.path == "*") return {};
  http::PathResult r = http::normalize_path(req.path, opt);
  if (r.error != http::PathError::kNone) {
    st.paths_rejected[static_cast<std::size_t>(r.error)].fetch_add(1, std::memory_order_relaxed);
    return "path refused: " + std::string(http::path_error_name(r.error));
  }
  if (r.changed) st.paths_normalized.fetch_add(1, std::memory_order_relaxed);
  if (!http::normalize_authority(req.authority)) {
    st.paths_rejected[static_cast<std::size_t>(http::PathError::kMalformedEncoding)].fetch_add(1, std::memory_order_relaxed);
    return "host refused: percent-encoded or empty";
  }
  return {};
}

// The verified client certificate's subject goes upstream in `header`; whatever the
// client sent under that name never does (it would let anyone claim any identity).
void pass_client_subject(http::RequestHead& req, const std::string& header, const std::optional<io::TlsSummary>& tls) {
  req.headers.remove(header);
  if (tls && !tls->peer_subject.empty()) req.headers.add(header, tls->peer_subject);
}

// One request, from its parsed head (or failed read) to the access log; returns whether
// the connection may serve another. A coroutine of its own so that the per-request state
// (RequestContext, the error reply, handle_request's frame) exists only while a request
// is in flight: an idle keep-alive connection keeps just serve_connection's small frame.
// `lsnap`/`lcfg` are the connection's listener snapshot, moved to the newest one that
// still has the listener.
exec::Task<bool> serve_request(Gateway& gw, ListenerState& ls, const http::HeadRead& hr, io::Stream& client,
                               http::MessageReader& reader, const Peer& who,
                               std::shared_ptr<const Snapshot>& lsnap, const config::ListenerSection*& lcfg) {
  const std::string& peer = who.address;
  RequestContext ctx;
  ctx.start = exec::tick_now();
  ctx.client = peer;
  ctx.client_ip = who.ip;
  if (who.tls) ctx.tls = &*who.tls;
  // The snapshot current when the request arrived serves it to the end.
  std::shared_ptr<const Snapshot> snap = gw.snapshot();
  if (const config::ListenerSection* now = snap->listener(ls.key)) {
    lcfg = now;
    lsnap = snap;
  }
  if (hr.status != http::ReadStatus::kOk) {
    int status = 0;
    if (hr.status == http::ReadStatus::kParseError) status = reader.parser().error_status();
    if (hr.status == http::ReadStatus::kTimeout && hr.partial) status = 408;  // slowloris
    if (status != 0) {
      ctx.note = status == 408 ? "request header timeout" : reader.parser().error_detail();
      co_await refuse_request(gw, *snap, *lcfg, client, status, ctx.note, peer);
    }
    co_return false;
  }
  if (std::string why = normalize_request(reader.parser().request(), lcfg->path, ls.stats); !why.empty()) {
    co_await refuse_request(gw, *snap, *lcfg, client, 400, why, peer);
    co_return false;
  }
  if (lcfg->tls && lcfg->tls->client_auth != config::ClientAuth::kOff) {
    pass_client_subject(reader.parser().request(), lcfg->tls->client_subject_header, who.tls);
  }

  Handled h = co_await handle_request(gw, snap, *lcfg, client, reader, ctx);
  exec::set_current_task_priority(false);  // permits released: back to the ordinary lane

  uint64_t dur_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(exec::tick_now() - ctx.start).count());
  const http::RequestHead& req = reader.parser().request();
  RouteStats& rs = ctx.route_index >= 0 ? *snap->route_stats[static_cast<std::size_t>(ctx.route_index)]
                                        : *snap->unrouted_stats;
  rs.count(req.method, ctx.status, dur_ns);
  write_access_log(ctx, req, dur_ns / 1000);
  co_return h.keep_alive && !gw.draining();
}

}  // namespace

exec::Task<void> serve_connection(Gateway& gw, std::shared_ptr<ListenerState> ls, std::shared_ptr<SessionEntry> entry,
                                  io::Stream client) {
  struct Leave {
    Gateway& gw;
    std::shared_ptr<ListenerState>& ls;
    std::shared_ptr<SessionEntry>& entry;
    ~Leave() {
      ls->stats.connections_active.fetch_sub(1, std::memory_order_relaxed);
      ls->slot_freed.notify_one();
      gw.unregister_session(entry);
    }
  } leave{gw, ls, entry};

  Peer who;
  who.address = endpoint_text(client.remote_endpoint());
  const std::string& peer = who.address;
  who.ip = peer.substr(0, peer.rfind(':'));
  if (!who.ip.empty() && who.ip.front() == '[') who.ip = who.ip.substr(1, who.ip.size() - 2);

  // lcfg points into lsnap's configuration; lsnap keeps it alive (a reload may drop this
  // listener from newer snapshots while the connection lives on).
  std::shared_ptr<const Snapshot> lsnap = gw.snapshot();
  const config::ListenerSection* lcfg = lsnap->listener(ls->key);
  if (lcfg == nullptr) co_return;  // the listener was removed by a reload meanwhile
  exec::label_current_task({exec::TaskKind::kConnection, lcfg->name + " " + peer});
  // Held for the connection's life: the SNI callback and the contexts it switches to
  // belong to it (a reload may publish new certificates meanwhile).
  std::shared_ptr<const tls::ServerContext> tls_ctx = lsnap->tls_for(ls->key);
  if (tls_ctx) {
    if (!co_await accept_tls(*ls, *tls_ctx, client, peer)) {
      client.close();
      co_return;
    }
    who.tls = client.tls()->summary();
  }
  http::MessageReader reader(client, http::Parser::Mode::kRequest, parser_limits(*lcfg));

  for (bool first = true;; first = false) {
    io::Deadline first_byte = io::Deadline::after(first ? lcfg->header_timeout : lcfg->idle_timeout);
    // After a response the client needs a round trip before its next request arrives;
    // the first request usually comes with the connection.
    http::HeadRead hr = co_await reader.read_head(first_byte, lcfg->header_timeout, nullptr, /*wait_first=*/!first);
    int expected = first ? SessionEntry::kFresh : SessionEntry::kIdle;
    if (!entry->state.compare_exchange_strong(expected, SessionEntry::kBusy)) break;  // drain closed us
    if (!co_await serve_request(gw, *ls, hr, client, reader, who, lsnap, lcfg)) break;
    entry->state.store(SessionEntry::kIdle, std::memory_order_release);
  }
  client.close();
}

exec::Task<void> accept_loop(Gateway& gw, std::shared_ptr<ListenerState> ls) {
  int backoff_ms = 10;
  for (;;) {
    if (ls->stopping.load(std::memory_order_acquire)) co_return;
    std::shared_ptr<const Snapshot> snap = gw.snapshot();
    const config::ListenerSection* lcfg = snap->listener(ls->key);
    std::size_t max_conn = lcfg != nullptr ? lcfg->max_connections : 10000;
    bool backlog_mode = lcfg != nullptr && lcfg->on_max_connections == config::OverflowAction::kBacklog;
    if (backlog_mode && static_cast<std::size_t>(ls->stats.connections_active.load()) >= max_conn) {
      // Leave excess connections in the kernel backlog until a slot frees up.
      co_await ls->slot_freed.notified();
      continue;
    }
    auto conn = co_await ls->listener->accept();
    // A connection accepted while the listener stops (drain, restart, upgrade) was taken
    // from the backlog: it is served (registered fresh, so drain answers its first request),
    // never dropped. The loop ends at the top.
    if (!conn.ok() && ls->stopping.load(std::memory_order_acquire)) co_return;
    if (!conn.ok()) {
      std::error_code ec = conn.error();
      ls->stats.accept_errors.fetch_add(1, std::memory_order_relaxed);
      if (ec.value() == EMFILE || ec.value() == ENFILE || ec.value() == ENOBUFS || ec.value() == ENOMEM) {
        // Out of descriptors/memory: back off (existing connections keep being served).
        SG_LOG_WARN("listener {}: accept failed: {}; retrying in {}ms", ls->address, ec.message(), backoff_ms);
        co_await io::sleep_for(std::chrono::milliseconds(backoff_ms));
        backoff_ms = std::min(backoff_ms * 2, 1000);
      } else {
        SG_LOG_WARN("listener {}: accept failed: {}", ls->address, ec.message());
      }
      continue;
    }
    backoff_ms = 10;
    io::Stream s(std::move(*conn));
    ls->stats.connections_total.fetch_add(1, std::memory_order_relaxed);
    if (static_cast<std::size_t>(ls->stats.connections_active.load()) >= max_conn) {
      ls->stats.rejected_max_connections.fetch_add(1, std::memory_order_relaxed);
      // Over the connection limit: a quick 503 and close, off the accept loop.
      std::shared_ptr<ListenerState> keep = ls;
      exec::spawn_detached(
          [s = std::move(s), lcfg, keep]() mutable -> exec::Task<void> {
        LocalReply lr;
        lr.status = 503;
        lr.close = true;
        lr.headers.emplace_back("Retry-After", "1");
        std::string bytes = render_local_reply(lr);
        co_await s.write_all(bytes, io::Deadline::after(1s));
        s.shutdown_write();
        s.close();
      },
          {exec::TaskKind::kConnection, "over max_connections"});
      continue;
    }
    ls->stats.connections_active.fetch_add(1, std::memory_order_relaxed);
    auto entry = gw.register_session();
    auto handle = exec::spawn(serve_connection(gw, ls, entry, std::move(s)), {exec::TaskKind::kConnection, {}});
    gw.attach_session_task(entry, std::move(handle));
  }
}

}  // namespace sg::proxy
