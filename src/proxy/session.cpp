// The downstream side: the keep-alive loop of a connection, and what happens to each
// request before and after the upstream exchange (routing, local replies, admission,
// access log, metrics).
#include "proxy/session.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <utility>

#include "common/log.h"
#include "exec/burst_task.h"
#include "http/serialize.h"
#include "io/proxy_protocol.h"
#include "proxy/access_log.h"
#include "proxy/admission.h"
#include "proxy/downstream.h"
#include "proxy/exchange.h"
#include "proxy/forwarded_client.h"
#include "proxy/headers.h"
#include "proxy/local_reply.h"
#include "proxy/own_reply.h"
#include "proxy/peer.h"
#include "proxy/request_body.h"

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

// Names the connection's task in /debug/tasks ("listener ip:port").
void label_connection(const std::string& listener, const Peer& who) {
  // "listener ip:port", composed on the stack (the registry keeps kTaskNameMax bytes of
  // it anyway): concatenating std::strings cost a malloc per connection.
  char name[exec::kTaskNameMax];
  std::size_t n = 0;
  for (std::string_view part : {std::string_view(listener), std::string_view(" "), who.address()}) {
    const std::size_t k = std::min(part.size(), sizeof(name) - n);
    std::memcpy(name + n, part.data(), k);
    n += k;
  }
  exec::label_current_task({exec::TaskKind::kConnection, std::string_view(name, n)});
}

// What the client connection's TLS handshake agreed on; null on a plain listener.
const io::TlsSummary* client_tls(io::Stream& client) {
  const io::TlsLayer* t = client.tls();
  return t != nullptr ? &t->summary() : nullptr;
}

// The TLS handshake of a new connection on a TLS listener; counts its outcome and returns
// whether it succeeded.
// The listener's TLS contexts come from `snap` and stay with the stream (TlsLayer::server).
exec::Task<bool> accept_tls(ListenerState& ls, const Snapshot& snap, io::Stream& client, const Peer& who) {
  const std::string_view peer = who.address();
  std::shared_ptr<const tls::ServerContext> tc = snap.tls_for(ls.key);
  if (tc == nullptr) co_return false;  // never serve plaintext on a TLS listener
  const io::Deadline handshake_deadline = io::Deadline::after(tc->config().handshake_timeout);
  SSL_CTX* ctx = tc->default_ctx();
  std::error_code ec = co_await client.accept_tls(ctx, std::move(tc), handshake_deadline);
  io::TlsLayer* t = client.tls();
  if (!ec) {
    const io::TlsSummary& s = t->summary();
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

// A listener behind a load balancer (proxy_protocol): the connection's PROXY protocol
// header, within header_timeout, names the client; without a valid one the connection is
// closed, counted, and logged at most once a second per listener (a balancer that does
// not send it makes every connection fail, and the log should say why, not flood).
exec::Task<bool> take_proxy_header(ListenerState& ls, io::Stream& client, Peer& who,
                                   const config::ListenerSection& l) {
  io::ProxyHeader h = co_await io::read_proxy_header(client.tcp(), io::Deadline::after(l.header_timeout));
  if (h.status == io::ProxyHeader::Status::kDone) {
    if (h.source) who.reset(*h.source);
    co_return true;
  }
  ls.stats.proxy_header_errors.fetch_add(1, std::memory_order_relaxed);
  const int64_t now_s =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  int64_t last = ls.stats.proxy_header_logged_s.load(std::memory_order_relaxed);
  if (now_s > last && ls.stats.proxy_header_logged_s.compare_exchange_strong(last, now_s)) {
    SG_LOG_WARN("listener {}: closed a connection from {}: {} (proxy_protocol is on: every connection must start "
                "with a PROXY protocol header)",
                l.name, who.address(), h.error);
  }
  co_return false;
}

struct Handled {
  bool keep_alive = false;
};


// Admitted under a limit: until its response is done, this task's wake-ups go ahead of
// new requests (the priority lane, exec/context.h), so that under overload the permits
// cycle at the upstream's pace instead of waiting behind the run queue. Without a permit
// there is nothing to cycle: at 1,000 busy connections the lane only reordered work and
// overflowed into the injection queue, where its tasks waited behind later ones.
void enter_priority_lane_if_admitted(const exec::Semaphore::Permit (&permits)[kAdmissionLevels]) {
  const bool holds_permit =
      std::any_of(std::begin(permits), std::end(permits), [](const exec::Semaphore::Permit& p) { return bool(p); });
  if (holds_permit) exec::set_current_task_priority(true);
}


exec::Task<Handled> handle_request(Gateway& gw, const std::shared_ptr<const Snapshot>& snap,
                                   const config::ListenerSection& lcfg, io::Stream& client,
                                   http::MessageReader& reader, RequestContext& ctx) {
  http::RequestHead& req = reader.parser().request();
  GatewayStats& gs = gw.stats();
  gs.downstream_requests.fetch_add(1, std::memory_order_relaxed);
  ctx.request_id = RequestId::for_request(req);

  const bool has_body = req.body != http::BodyKind::kNone;
  BufferedBody buffered;  // with routes[].request_buffering
  // Every reply to this request, from stealgate or relayed, goes out through `response`.
  Http1Response response(client, reader, lcfg);
  // Takes a reference: class-type temporaries must not be passed by value into coroutines
  // (see exec/coro.h). ctx.note is set by the caller.
  auto local = [&](LocalReply& lr) -> exec::Task<Handled> {
    lr.minor = 1;
    lr.head = req.is_head();
    lr.close = lr.close || !req.keep_alive || req.is_http10() || gw.draining();
    // A request body left unread makes the connection unusable: it closes after the reply,
    // unless the body is here whole already (a small one comes with its head), so that a
    // refusal (a 503 under overload, a deny route) does not cost the client a new connection.
    if (!lr.close && has_body && !buffered.done) lr.close = !reader.skip_arrived_body();
    ctx.status = lr.status;
    ctx.bytes_out = local_reply_body_bytes(lr);
    gs.local_replies.fetch_add(1, std::memory_order_relaxed);
    bool ok = co_await response.send_local(lr);
    co_return Handled{ok && !lr.close};
  };

  const routing::CompiledRoute* route = snap->routes.match(req, lcfg.name, routing::ClientAddress(ctx.client_ip));
  if (route == nullptr) {
    LocalReply lr;
    lr.status = 404;
    ctx.note = "no route";
    co_return co_await local(lr);
  }
  ctx.route = route->cfg->name;
  ctx.route_index = static_cast<int>(route->index);
  const config::RouteSection& r = *route->cfg;
  response.set_route(r);

  if (std::optional<LocalReply> own = own_reply(*snap, *route, req, ctx)) co_return co_await local(*own);

  const bool buffering = has_body && r.request_buffering > 0;
  if (buffering) {
    BufferingResult b = co_await buffer_request_body(reader, response, lcfg, r.request_buffering, buffered, ctx.note);
    if (b.client_gone) co_return Handled{false};
    if (b.status != 0) {
      LocalReply lr;
      lr.status = b.status;
      lr.close = true;  // the body could not be read: where the next request begins is unknown
      co_return co_await local(lr);
    }
  }

  // Admission: global, then route, then cluster. Rejections never touch an upstream.
  exec::Semaphore::Permit permits[kAdmissionLevels];
  if (!admit_at_once(gw, *snap, *route, permits)) {
    Admission adm = co_await admit_request(gw, *snap, *route, client, permits);
    if (adm.outcome == Admission::kClientGone) {
      ctx.note = adm.note;
      co_return Handled{false};
    }
    if (adm.outcome == Admission::kRefused) {
      LocalReply lr = service_unavailable(snap->config->limits);
      ctx.note = adm.note;
      co_return co_await local(lr);
    }
  }
  enter_priority_lane_if_admitted(permits);

  Downstream down{client, reader, response, lcfg, gw.draining(), permits, buffering ? &buffered : nullptr};
  ForwardResult fr = co_await forward(gw, *snap, *route, down, ctx);
  co_return Handled{fr.client_reusable};
}

// Answers a request that cannot be served (malformed, too slow, a refused path) and logs
// it; the connection is closed after it.
exec::Task<void> refuse_request(Gateway& gw, const Snapshot& snap, const config::ListenerSection& lcfg,
                                io::Stream& client, http::MessageReader& reader, int status, const std::string& note,
                                std::string_view peer) {
  LocalReply lr;
  lr.status = status;
  lr.close = true;
  gw.stats().local_replies.fetch_add(1, std::memory_order_relaxed);
  Http1Response response(client, reader, lcfg);
  co_await response.send_local(lr);
  snap.unrouted_stats->count("OTHER", status, 0);
  log_refused_request(peer, status, note);
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
    const auto reason = static_cast<std::size_t>(http::PathError::kMalformedEncoding);
    st.paths_rejected[reason].fetch_add(1, std::memory_order_relaxed);
    return "host refused: percent-encoded or empty";
  }
  return {};
}

// The verified client certificate's subject goes upstream in `header`; whatever the
// client sent under that name never does (it would let anyone claim any identity).
void pass_client_subject(http::RequestHead& req, std::string_view header, const io::TlsSummary* tls) {
  req.headers.remove(header);
  if (tls && !tls->peer_subject.empty()) req.headers.add_copy(header, tls->peer_subject);
}

// One request, from its parsed head (or failed read) to the access log; returns whether
// the connection may serve another. A coroutine of its own so that the per-request state
// (RequestContext, the error reply, handle_request's frame) exists only while a request
// is in flight: an idle keep-alive connection keeps none of it (Connection, below).
// `lsnap`/`lcfg` are the connection's listener snapshot, moved to the newest one that
// still has the listener.
exec::Task<bool> serve_request(Gateway& gw, ListenerState& ls, const http::HeadRead& hr, io::Stream& client,
                               http::MessageReader& reader, const Peer& who,
                               std::shared_ptr<const Snapshot>& lsnap, const config::ListenerSection*& lcfg) {
  const std::string_view peer = who.address();
  RequestContext ctx;
  ctx.start = exec::tick_now();
  ctx.client = peer;
  ctx.peer_ip = ctx.client_ip = who.ip();
  ctx.tls = client_tls(client);
  ctx.local_authority = ls.local_authority;
  // The snapshot current when the request arrived serves it to the end.
  // (Most requests find the snapshot the connection already holds: no lookup then.)
  std::shared_ptr<const Snapshot> snap = gw.snapshot();
  if (snap != lsnap) {
    if (const config::ListenerSection* now = snap->listener(ls.key)) {
      lcfg = now;
      lsnap = snap;
    }
  }
  if (hr.status != http::ReadStatus::kOk) {
    int status = 0;
    if (hr.status == http::ReadStatus::kParseError) status = reader.parser().error_status();
    if (hr.status == http::ReadStatus::kTimeout && hr.partial) status = 408;  // slowloris
    if (status != 0) {
      ctx.note = status == 408 ? "request header timeout" : reader.parser().error_detail();
      co_await refuse_request(gw, *snap, *lcfg, client, reader, status, ctx.note, peer);
    }
    co_return false;
  }
  if (std::string why = normalize_request(reader.parser().request(), lcfg->path, ls.stats); !why.empty()) {
    co_await refuse_request(gw, *snap, *lcfg, client, reader, 400, why, peer);
    co_return false;
  }
  if (std::string_view header = client_subject_header(*lcfg); !header.empty()) {
    pass_client_subject(reader.parser().request(), header, ctx.tls);
  }
  if (!lcfg->trusted_proxy_blocks.empty()) {
    ctx.client_ip = forwarded_client(reader.parser().request().headers, ctx.peer_ip, lcfg->trusted_proxy_blocks,
                                     ctx.forwarded_client);
    if (ctx.client_ip.data() != ctx.peer_ip.data()) ctx.client = ctx.client_ip;
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
  co_return h.keep_alive;
}

// Serves the requests that arrive without a pause, from the first byte of one request
// until the connection is idle with nothing buffered (pipelined requests are served in
// turn). Returns whether the connection stays open. `first_byte`: when the first request's
// first byte must have arrived; `fresh`: it is the connection's first request. The reader,
// with its parser, lives only here, so an idle keep-alive connection holds neither.
exec::Task<bool> serve_requests(Gateway& gw, ListenerState& ls, SessionEntry& entry, io::Stream& client,
                                const Peer& who, io::Deadline first_byte, bool fresh,
                                std::shared_ptr<const Snapshot>& lsnap, const config::ListenerSection*& lcfg) {
  http::MessageReader reader(client, http::Parser::Mode::kRequest, parser_limits(*lcfg));
  for (;;) {
    // Busy from the first byte on (a burst starts only once bytes are here; a fresh
    // connection was never drain's to close): a drain that finds the head half read
    // answers it, where closing would reset a request the client cannot know to retry.
    int expected = fresh ? SessionEntry::kFresh : SessionEntry::kIdle;
    fresh = false;
    if (!entry.state.compare_exchange_strong(expected, SessionEntry::kBusy)) co_return false;  // drain closed us
    http::HeadRead hr = co_await reader.read_head(first_byte, lcfg->header_timeout);
    if (!co_await serve_request(gw, ls, hr, client, reader, who, lsnap, lcfg)) co_return false;
    // A response that went out before a drain began promised keep-alive: the connection
    // turns idle, and is closed with the idle ones (at once, or after drain_idle_grace).
    entry.state.store(SessionEntry::kIdle);  // sequentially consistent: see SessionEntry
    if (gw.idle_connections_closed()) co_return false;
    if (!reader.has_buffered()) co_return true;
    first_byte = io::Deadline::after(lcfg->idle_timeout);  // a pipelined request is here already
  }
}

// One downstream connection, from accept to close, as the body of a BurstTask
// (exec/burst_task.h): each burst serves the requests that arrive without a pause
// (serve_requests); between bursts the connection waits for the next request's first byte
// (or idle_timeout) in its task, with no coroutine frame. So an idle keep-alive connection
// holds this object, in its task's allocation, and its socket's pending receive.
class Connection {
 public:
  // `peer`: as accept reported it.
  Connection(std::shared_ptr<ListenerState> ls, io::Stream client, const io::tcp::endpoint& peer)
      : ls_(std::move(ls)), client_(std::move(client)), who_(peer) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() {
    wait_.stop();
    client_.close();
    if (entry_.linked()) gw().leave_session(entry_);
    ls_->stats.connections_active.fetch_sub(1, std::memory_order_relaxed);
    ls_->slot_freed.notify_one();
  }

  exec::Task<bool> burst() {
    if (lcfg_ == nullptr) return open();
    return serve_requests(gw(), *ls_, entry_, client_, who_, io::Deadline::after(lcfg_->idle_timeout), false,
                          lsnap_, lcfg_);
  }
  void idle(exec::Waker w) {
    client_.release_idle_buffers();
    client_.wait_readable(wait_, io::Deadline::after(lcfg_->idle_timeout), std::move(w));
  }
  exec::BurstWake woken(const exec::WaitResult& r) {
    if (!wait_.finish(r)) return exec::BurstWake::kEnd;  // the idle timeout, or an error
    // A wake with nothing to read (a receive that found no free buffer, and no bytes)
    // waits again: a burst would wait in read_head with its frames and a parser until the
    // next request (100-250 of 10,000 idle connections did, after a burst of new ones).
    return client_.woke_with_input() ? exec::BurstWake::kBurst : exec::BurstWake::kWaitAgain;
  }

 private:
  Gateway& gw() const { return *ls_->gateway; }

  // The first burst: registers for drain, takes the listener's configuration, runs the
  // TLS handshake on a TLS listener, serves the first requests.
  exec::Task<bool> open() {
    if (!gw().enter_session(entry_)) co_return false;  // sessions are being aborted
    lsnap_ = gw().snapshot();
    const config::ListenerSection* lcfg = lsnap_->listener(ls_->key);
    if (lcfg == nullptr) co_return false;  // the listener was removed by a reload meanwhile
    if (lcfg->proxy_protocol && !co_await take_proxy_header(*ls_, client_, who_, *lcfg)) co_return false;
    label_connection(lcfg->name, who_);
    if (lcfg->tls && !co_await accept_tls(*ls_, *lsnap_, client_, who_)) co_return false;
    lcfg_ = lcfg;
    co_return co_await serve_requests(gw(), *ls_, entry_, client_, who_, io::Deadline::after(lcfg->header_timeout),
                                      true, lsnap_, lcfg_);
  }

  std::shared_ptr<ListenerState> ls_;
  // lcfg_ points into lsnap_'s configuration; lsnap_ keeps it alive (a reload may drop
  // this listener from newer snapshots while the connection lives on). Null until open()
  // has it.
  std::shared_ptr<const Snapshot> lsnap_;
  const config::ListenerSection* lcfg_ = nullptr;
  io::Stream client_;
  Peer who_;
  SessionEntry entry_;
  io::ReadableWait wait_;
};

// An idle keep-alive connection is this task alone: keep it within the 320-byte
// allocation class (task_alloc: 64-byte steps, no per-block header). It fits exactly: a
// field more costs every idle connection 64 bytes.
static_assert(sizeof(exec::BurstTask<Connection>) <= 320);

}  // namespace

namespace {

using Accepted = Result<std::optional<io::TcpStream>>;

// In backlog mode: the next connection on `socket` when the listener is below
// `max_conn`, or nullopt to go round the loop again (a slot freed, or nothing was queued
// after all). The limit is checked between the wait and the accept: a loop that waited
// inside accept() would take a connection past it once another loop's socket had filled
// the last slot.
exec::Task<Accepted> accept_below_limit(ListenerState& ls, io::TcpListener& socket, std::size_t max_conn,
                                        bool& waited_for_slot, io::tcp::endpoint& peer) {
  auto full = [&] { return static_cast<std::size_t>(ls.stats.connections_active.load()) >= max_conn; };
  if (full()) {
    // Leave excess connections in the kernel backlog until a slot frees up.
    co_await ls.slot_freed.notified();
    waited_for_slot = true;
    co_return std::optional<io::TcpStream>();
  }
  // A freed slot wakes one loop. With a socket per worker, the loop that finds the slot
  // still free passes the wake on: a connection queued on another socket must not wait
  // for a second slot. (Only below the limit, so two loops at the limit never wake each
  // other in turn.)
  if (std::exchange(waited_for_slot, false) && ls.sockets.size() > 1) ls.slot_freed.notify_one();
  if (std::error_code ec = co_await socket.wait_acceptable()) co_return ec;
  if (full()) co_return std::optional<io::TcpStream>();
  co_return socket.try_accept(&peer);
}

// Over the listener's connection limit: a quick 503 and close, off the accept loop. (On a
// TLS listener only a close: a 503 would cost the handshake the limit is there to spare.)
void refuse_over_limit(const Snapshot& snap, const config::ListenerSection* lcfg, io::Stream s) {
  if (lcfg != nullptr && lcfg->tls) {
    s.close();
    return;
  }
  LocalReply lr = service_unavailable(snap.config->limits);
  lr.close = true;
  exec::spawn_detached(
      [s = std::move(s), bytes = render_local_reply(lr)]() mutable -> exec::Task<void> {
    co_await s.write_all(bytes, io::Deadline::after(1s));
    co_await s.shutdown_write(io::Deadline::after(1s));
    s.close();
  },
      {exec::TaskKind::kConnection, "over max_connections"});
}

// A connection taken from a listener's socket: served by a task of its own, or refused
// when the listener is at its limit (backlog mode leaves excess connections in the kernel,
// so one it took anyway is served).
// `lcfg` is the listener's section in `snap` (null if a reload removed it).
void serve_accepted(Gateway& gw, const std::shared_ptr<ListenerState>& ls, const Snapshot& snap,
                    const config::ListenerSection* lcfg, io::TcpStream conn, const io::tcp::endpoint& peer) {
  const std::size_t max_conn = lcfg != nullptr ? lcfg->max_connections : 10000;
  const bool backlog_mode = lcfg != nullptr && lcfg->on_max_connections == config::OverflowAction::kBacklog;
  io::Stream s(std::move(conn));
  ls->stats.connections_total.fetch_add(1, std::memory_order_relaxed);
  // (In backlog mode two loops of a socket group that check the limit at the same
  // moment can both take a connection: the one over the limit is served.)
  if (!backlog_mode && static_cast<std::size_t>(ls->stats.connections_active.load()) >= max_conn) {
    ls->stats.rejected_max_connections.fetch_add(1, std::memory_order_relaxed);
    refuse_over_limit(snap, lcfg, std::move(s));
    return;
  }
  ls->stats.connections_active.fetch_add(1, std::memory_order_relaxed);
  gw.expect_session();
  exec::spawn_bursts<Connection>({exec::TaskKind::kConnection, {}}, ls, std::move(s), peer);
}

}  // namespace

exec::Task<void> accept_loop(Gateway& gw, std::shared_ptr<ListenerState> ls, io::TcpListener& socket) {
  int backoff_ms = 10;
  bool waited_for_slot = false;
  std::shared_ptr<const Snapshot> snap;
  const config::ListenerSection* lcfg = nullptr;
  for (;;) {
    if (ls->stopping.load(std::memory_order_acquire)) co_return;
    if (std::shared_ptr<const Snapshot> now = gw.snapshot(); now != snap) {  // a reload: look again
      snap = std::move(now);
      lcfg = snap->listener(ls->key);
    }
    std::size_t max_conn = lcfg != nullptr ? lcfg->max_connections : 10000;
    bool backlog_mode = lcfg != nullptr && lcfg->on_max_connections == config::OverflowAction::kBacklog;
    io::tcp::endpoint peer;
    Accepted conn = std::optional<io::TcpStream>();
    if (backlog_mode) {
      conn = co_await accept_below_limit(*ls, socket, max_conn, waited_for_slot, peer);
      if (conn.ok() && !conn->has_value()) continue;
    } else if (auto one = co_await socket.accept({}, &peer); one.ok()) {
      conn = std::optional<io::TcpStream>(std::move(*one));
    } else {
      conn = one.error();
    }
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
    serve_accepted(gw, ls, *snap, lcfg, std::move(**conn), peer);
  }
}

exec::Task<void> serve_taken(Gateway& gw, std::shared_ptr<ListenerState> ls) {
  for (io::TcpListener& socket : ls->sockets) {
    std::vector<io::TcpListener::TakenConnection> taken = co_await socket.stop_accepting();
    if (taken.empty()) continue;
    SG_LOG_DEBUG("listener {}: serving {} connections taken as it stopped", ls->address, taken.size());
    std::shared_ptr<const Snapshot> snap = gw.snapshot();
    const config::ListenerSection* lcfg = snap->listener(ls->key);
    for (auto& c : taken) serve_accepted(gw, ls, *snap, lcfg, std::move(c.stream), c.peer);
  }
}

}  // namespace sg::proxy
