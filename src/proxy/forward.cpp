// The upstream exchange of one request, as phases. Before any attempt: prepare (which
// upgrade may pass, the upstream request head, body bytes that came with the head). Then
// each attempt on one endpoint: connect or reuse, send the head, wait for 100 Continue,
// stream the body, read the response head (relaying 1xx), judge it, relay the response.
// Each phase returns a Verdict, and run() alone acts on it: retries and replays are data,
// decided where the failure is seen and carried out in one place.
//
// Failure policy:
//   * connect failures (TCP or TLS): retried on another endpoint (nothing was sent), when
//     configured, within the retry budget, without counting against retries.attempts;
//   * a pooled connection that turns out dead before any response byte (write fails, EOF,
//     or an idle-timeout 408): the request is replayed once on a new connection (not a
//     retry), for idempotent requests or when nothing of a body was streamed;
//   * 5xx / gateway errors / resets / timeouts: retried only for idempotent requests without
//     a body, when configured, within the cluster's retry budget;
//   * once a response byte went to the client, no retry: an upstream that dies mid-body
//     makes us close the client connection (never a fake complete response).
#include <optional>

#include "common/log.h"
#include "io/string_pool.h"
#include "proxy/downstream.h"
#include "proxy/exchange.h"
#include "proxy/headers.h"
#include "proxy/local_reply.h"
#include "proxy/request_body.h"
#include "proxy/retry.h"

namespace sg::proxy {

namespace {

using namespace std::chrono_literals;

// How long we wait for an upstream's 100 Continue before sending the body anyway (what
// curl and others do when the next hop ignores Expect).
constexpr auto kExpectContinueWait = 1s;
// A Content-Length response body at least this big goes from the upstream to the client
// by splice (io/splice.h) after the head and the body bytes that came with it: GET 64 KiB
// through recv and sendmsg spent 12-15% of the proxy's CPU copying; spliced, it took
// 0.89-0.94x the CPU per request (tests/bench/proxy_ab.sh, three runs). A smaller body
// stays on the copy path, where head and body leave in one sendmsg after one recv
// (top_up) instead of a sendmsg and two splices.
constexpr uint64_t kPassThroughMin = 32 * 1024;

std::string rewritten_target(const http::RequestHead& req, const config::RouteSection& r) {
  if (req.path == "*") return "*";
  std::string path = req.path;
  if (!r.rewrite_path.empty()) {
    path = r.rewrite_path;
  } else if (!r.strip_prefix.empty() && path.compare(0, r.strip_prefix.size(), r.strip_prefix) == 0) {
    path.erase(0, r.strip_prefix.size());
    if (path.empty() || path.front() != '/') path.insert(path.begin(), '/');
  }
  if (!req.query.empty()) path += "?" + req.query;
  return path;
}

// A new connection to `ep` in `out`: TCP, then the TLS handshake when the cluster speaks
// TLS (a failed verification is logged: an operator must see why every request fails).
// On failure `why` says what failed.
exec::Task<std::error_code> open_upstream(io::IoContext ioc, upstream::Cluster& cluster, upstream::Endpoint& ep,
                                          io::Stream& out, std::chrono::milliseconds timeout, std::string& why) {
  const io::Deadline dl = io::Deadline::after(timeout);
  auto c = co_await io::TcpStream::connect(ioc, ep.address(), dl);
  if (!c.ok()) {
    why = "upstream connect to " + ep.name() + " failed: " + c.error().message();
    co_return c.error();
  }
  out = io::Stream(std::move(*c));
  const tls::ClientContext* tls = cluster.tls();
  if (tls == nullptr) co_return std::error_code{};
  if (std::error_code ec = co_await out.connect_tls(tls->ctx(), tls->server_name(ep.host()), dl, ep.tls_session())) {
    why = "upstream TLS handshake with " + ep.name() + " failed: " +
          (out.tls() != nullptr && !out.tls()->reason().empty() ? out.tls()->reason() : ec.message());
    SG_LOG_WARN("cluster {}: {}", cluster.name(), why);
    ep.tls_session()->forget();  // the next connection starts afresh
    out.close();
    co_return ec;
  }
  cluster.stats().tls_handshakes[out.tls()->resumed() ? 1 : 0].fetch_add(1, std::memory_order_relaxed);
  co_return std::error_code{};
}

// What a phase decided.
enum class Next {
  kGoOn,          // on to the next phase
  kDone,          // the response was relayed (or the tunnel ended)
  kReply,         // stealgate answers the client itself (status, close)
  kAbort,         // the client is gone, or a response broke after it began: close the client
  kRetry,         // another endpoint: a retry of a request an upstream may have seen
  kConnectRetry,  // another endpoint after a connect failure (nothing was sent)
  kReplay,        // the same request on a new connection: the pooled one was dead
};

struct Verdict {
  Next next = Next::kGoOn;
  int status = 0;      // kReply
  bool close = false;  // kReply: close the client connection after it
};

Verdict go_on() { return {}; }
Verdict then(Next n) { return {n, 0, false}; }
Verdict reply_with(int status, bool close) { return {Next::kReply, status, close}; }

// ctx.note is set where a verdict is made (no class-type temporaries into coroutines:
// exec/coro.h).
class Exchange {
 public:
  Exchange(Gateway& gw, const Snapshot& snap, const routing::CompiledRoute& route, Downstream& down,
           RequestContext& ctx)
      : gw_(gw),
        snap_(snap),
        rcfg_(*route.cfg),
        cluster_(*route.cluster),
        down_(down),
        response_(down.response),
        ctx_(ctx),
        req_(down.reader.parser().request()),
        idempotent_(is_idempotent(req_.method)),
        has_body_(req_.body != http::BodyKind::kNone),
        chunked_request_(req_.body == http::BodyKind::kChunked),
        cluster_active_(cluster_.stats().active),
        budget_(cluster_, rcfg_.retries),
        max_attempts_(1 + rcfg_.retries.attempts),
        request_body_consumed_(!has_body_) {
    ctx_.cluster = cluster_.name();
  }

  exec::Task<ForwardResult> run();

 private:
  Verdict prepare();
  exec::Task<ForwardResult> reply(int status, bool close);
  // May be sent again after an upstream saw it (timeout, reset and 5xx retries): idempotent,
  // with no body or one held whole, which came with the head or was read by
  // routes[].request_buffering (early_body_ keeps it across attempts, as for a replay); a
  // streamed body is gone.
  bool resendable() const { return idempotent_ && request_body_consumed_ && !body_started_; }
  bool can_retry(bool configured) {
    return configured && attempt_ - connect_retries_ + 1 < max_attempts_ && budget_.try_take();
  }

  // One attempt on one endpoint, phase by phase.
  exec::Task<Verdict> attempt();
  bool reuse_pooled();  // a pooled connection to the endpoint, without waiting
  exec::Task<Verdict> connect();
  Verdict head_not_sent(std::error_code ec);
  exec::Task<Verdict> await_continue();
  exec::Task<Verdict> send_body();
  exec::Task<Verdict> read_final_head();
  Verdict judge_head_read();  // a response head that did not come, or a replayable 408
  Verdict judge_final();      // 5xx retries, outlier accounting
  exec::Task<Verdict> relay_response();
  // The rest of a big body through the kernel; nullopt when it cannot be (nothing sent).
  exec::Task<std::optional<Verdict>> relay_rest(std::span<const std::string_view> pieces);
  exec::Task<Verdict> upstream_broke(bool timed_out);
  Verdict client_write_failed();
  Verdict release_upstream();  // to the pool after a clean exchange, else closed
  std::string request_last_chunk() const {
    return last_chunk(down_.reader.parser().trailers(), &rcfg_.request_headers,
                      client_subject_header(down_.listener));
  }

  Gateway& gw_;
  const Snapshot& snap_;
  const config::RouteSection& rcfg_;
  upstream::Cluster& cluster_;
  Downstream& down_;
  DownstreamResponse& response_;
  RequestContext& ctx_;
  http::RequestHead& req_;
  const bool idempotent_;
  const bool has_body_;
  const bool chunked_request_;
  InFlight cluster_active_;
  RetryBudget budget_;
  const uint32_t max_attempts_;

  // The request's state across attempts.
  bool request_body_consumed_;  // the client's body was read to its end
  bool body_started_ = false;   // a body byte was streamed (the request cannot be replayed)
  std::string upgrade_;         // the Upgrade value forwarded ("" = none)
  io::PooledString head_bytes_;  // the upstream request head
  uint64_t hash_ = 0;           // ring_hash key
  // Body bytes that arrived with the head go upstream in the same write as the head (and,
  // when the whole body is here, with its last chunk). They stay valid views into the
  // client reader until its next read, so a replay can still send them.
  http::BodyRead early_body_;
  std::string early_tail_;
  uint32_t attempt_ = 0;
  // Endpoints whose connect failed for this request, and how many attempts went to such
  // retries: a connect failure never reached an upstream, so trying every other endpoint
  // once is always safe (nginx's default too); it counts against the retry budget, not
  // against `retries.attempts`, which bounds retries of requests an upstream has seen.
  uint64_t connect_failed_ = 0;
  uint32_t connect_retries_ = 0;
  int exclude_ = -1;
  bool fresh_only_ = false;  // a pooled connection just failed: use a new one

  // The current attempt.
  upstream::Endpoint* ep_ = nullptr;
  int idx_ = -1;
  bool reused_ = false;
  bool replayable_ = false;  // could be resent on a new connection if this one was dead
  io::Stream up_;
  std::optional<http::MessageReader> up_reader_;
  http::HeadRead hr_;
  bool have_head_ = false;  // hr_ holds a head read that is still to be judged
  bool upgraded_ = false;
  exec::Clock::time_point sent_at_{};
  bool head_time_recorded_ = false;
};

Verdict Exchange::prepare() {
  bool upgrade_refused = false;
  upgrade_ = allowed_upgrade(req_, rcfg_.upgrades, upgrade_refused);
  if (upgrade_refused) gw_.stats().upgrades_refused.fetch_add(1, std::memory_order_relaxed);
  if (upgrade_.empty()) down_.reader.parser().refuse_upgrade();
  ForwardInfo info{ctx_.peer_ip, ctx_.request_id.view(), ctx_.tls != nullptr ? "https" : "http", upgrade_, {}};
  std::string asked;  // a wildcard listener's connection: the socket's own address
  if (req_.authority.empty() && req_.headers.get("Host") == nullptr) {
    // The address the request came to: the listener's, or else the socket's (a syscall,
    // only for such requests).
    info.default_authority = ctx_.local_authority;
    if (info.default_authority.empty()) {
      asked = io::endpoint_text(down_.client.local_endpoint());
      info.default_authority = asked;
    }
  }
  append_upstream_request_head(head_bytes_.str(), req_, rewritten_target(req_, rcfg_), &rcfg_, info);

  const config::ClusterSection& ccfg = cluster_.config();
  if (ccfg.lb == config::LbPolicy::kRingHash) {
    const std::string* hv = ccfg.hash_header.empty() ? nullptr : req_.headers.get(ccfg.hash_header);
    hash_ = upstream::hash64(hv != nullptr ? std::string_view(*hv) : std::string_view(ctx_.client_ip));
  }
  if (!has_body_ || req_.expect_continue) return go_on();
  if (down_.buffered != nullptr) {
    early_body_ = down_.buffered->as_read();
  } else {
    // A small body that came with the head leaves with it: one write upstream, not two.
    down_.reader.top_up(req_.body);
    early_body_ = down_.reader.buffered_body();
  }
  if (early_body_.status != http::ReadStatus::kOk) {
    int st = down_.reader.parser().error_status();
    ctx_.note = "bad request body: " + down_.reader.parser().error_detail();
    return reply_with(st != 0 ? st : 400, true);
  }
  for (auto c : early_body_.chunks) ctx_.bytes_in += c.size();
  if (early_body_.done) {
    request_body_consumed_ = true;
    if (chunked_request_) early_tail_ = request_last_chunk();
  }
  return go_on();
}

exec::Task<ForwardResult> Exchange::reply(int status, bool close) {
  ctx_.status = status;
  gw_.stats().local_replies.fetch_add(1, std::memory_order_relaxed);
  LocalReply lr;
  if (status == 503) lr = service_unavailable(snap_.config->limits);
  lr.status = status;
  lr.close = close || !request_body_consumed_;
  lr.head = req_.is_head();
  ctx_.bytes_out = local_reply_body_bytes(lr);
  down_.release_admission();  // no upstream is involved any more
  const bool ok = co_await response_.send_local(lr);
  co_return ForwardResult{ok && !lr.close};
}

exec::Task<ForwardResult> Exchange::run() {
  if (Verdict v = prepare(); v.next == Next::kReply) co_return co_await reply(v.status, v.close);
  for (;;) {
    Verdict v = co_await attempt();
    switch (v.next) {
      case Next::kGoOn:
      case Next::kDone:
        co_return ForwardResult{response_.reusable()};
      case Next::kReply:
        co_return co_await reply(v.status, v.close);
      case Next::kAbort:
        co_return ForwardResult{false};
      case Next::kReplay:
        // The upstream never saw the request: the same attempt again, on a new connection.
        up_.close();
        fresh_only_ = true;
        cluster_.stats().stale_replays.fetch_add(1, std::memory_order_relaxed);
        break;
      case Next::kConnectRetry:
        ++connect_retries_;
        exclude_ = idx_;
        ++attempt_;
        break;
      case Next::kRetry:
        exclude_ = idx_;
        ++attempt_;
        break;
    }
  }
}

exec::Task<Verdict> Exchange::attempt() {
  ctx_.attempts = static_cast<int>(attempt_ + 1);
  ep_ = cluster_.pick(upstream::PickContext{hash_, exclude_, connect_failed_}, &idx_);
  if (ep_ == nullptr) {
    ctx_.note = "no healthy upstream";
    co_return reply_with(503, false);
  }
  ctx_.endpoint = ep_->name();
  InFlight ep_active(ep_->active);
  ep_->stats().requests.fetch_add(1, std::memory_order_relaxed);
  gw_.stats().upstream_requests.fetch_add(1, std::memory_order_relaxed);
  cluster_.stats().requests.fetch_add(1, std::memory_order_relaxed);

  // Phases that seldom wait are awaited inline here: every coroutine frame costs ~100
  // instructions on the path of every request.
  if (!reuse_pooled()) {
    if (Verdict v = co_await connect(); v.next != Next::kGoOn) co_return v;
  }
  sent_at_ = exec::tick_now();
  head_time_recorded_ = false;
  if (std::error_code ec = co_await write_body(up_, head_bytes_.str(), early_body_.chunks, chunked_request_,
                                               early_tail_, io::Deadline::after(rcfg_.timeout))) {
    co_return head_not_sent(ec);
  }
  http::ParserLimits up_limits;
  up_limits.max_header_bytes = 64 * 1024;
  up_limits.max_headers = 200;
  up_reader_.reset();
  up_reader_.emplace(up_, http::Parser::Mode::kResponse, up_limits);
  up_reader_->parser().expect_no_body(req_.is_head());
  have_head_ = false;
  upgraded_ = false;
  if (req_.expect_continue && has_body_ && !req_.is_http10()) {
    if (Verdict v = co_await await_continue(); v.next != Next::kGoOn) co_return v;
  }
  if (has_body_ && !have_head_ && !request_body_consumed_) {
    if (Verdict v = co_await send_body(); v.next != Next::kGoOn) co_return v;
  }
  if (Verdict v = co_await read_final_head(); v.next != Next::kGoOn) co_return v;
  if (Verdict v = judge_final(); v.next != Next::kGoOn) co_return v;
  co_return co_await relay_response();
}

bool Exchange::reuse_pooled() {
  // Replayable on a new connection if this one was closed under it: a body must have come
  // whole with the head (a streamed one cannot be resent).
  replayable_ = (idempotent_ || !has_body_) && !body_started_ && request_body_consumed_;
  std::optional<io::Stream> pooled = fresh_only_ ? std::nullopt : ep_->pool().acquire(replayable_);
  fresh_only_ = false;
  reused_ = pooled.has_value();
  if (reused_) up_ = std::move(*pooled);
  return reused_;
}

exec::Task<Verdict> Exchange::connect() {
  std::string why;
  const std::error_code ec =
      co_await open_upstream(gw_.runtime().context(), cluster_, *ep_, up_, cluster_.config().connect_timeout, why);
  if (!ec) {
    cluster_.stats().connections_opened.fetch_add(1, std::memory_order_relaxed);
    co_return go_on();
  }
  ep_->stats().connect_errors.fetch_add(1, std::memory_order_relaxed);
  cluster_.stats().connect_errors.fetch_add(1, std::memory_order_relaxed);
  gw_.stats().upstream_connect_errors.fetch_add(1, std::memory_order_relaxed);
  cluster_.record_failure(*ep_);
  connect_failed_ |= upstream::endpoint_bit(idx_);
  if (!body_started_ && retry_on(rcfg_, config::RetryOn::kConnectFailure) && cluster_.has_available(connect_failed_) &&
      budget_.try_take()) {
    co_return then(Next::kConnectRetry);
  }
  ctx_.note = why;
  co_return reply_with(ec == std::errc::timed_out ? 504 : 502, false);
}

Verdict Exchange::head_not_sent(std::error_code ec) {
  up_.close();
  if (reused_ && !body_started_) return then(Next::kReplay);
  cluster_.record_failure(*ep_);
  ctx_.note = "upstream write failed: " + ec.message();
  return reply_with(502, false);
}

// Expect: 100-continue: the upstream gets a moment to accept or refuse the body.
exec::Task<Verdict> Exchange::await_continue() {
  hr_ = co_await up_reader_->read_head(io::Deadline::after(kExpectContinueWait), rcfg_.timeout, &down_.client,
                                       /*wait_first=*/true);
  const bool timed_out = hr_.status == http::ReadStatus::kTimeout && !hr_.partial;
  const bool said_continue = hr_.status == http::ReadStatus::kOk && up_reader_->parser().response().status == 100;
  if (!timed_out && !said_continue) {
    have_head_ = true;  // a final response (or an error) before the body: judged later
    co_return go_on();
  }
  // The upstream said 100, or does not do 100-continue: the client may send its body.
  if (!co_await response_.send_continue()) co_return then(Next::kAbort);
  if (!said_continue) co_return go_on();
  auto fin = co_await up_reader_->read_body(io::Deadline::after(rcfg_.timeout));  // completes the 1xx message
  if (fin.status == http::ReadStatus::kOk) co_return go_on();
  up_.close();
  ctx_.note = "upstream broke after 100 Continue";
  co_return reply_with(502, true);
}

// The request body that did not come with the head, streamed to the upstream.
exec::Task<Verdict> Exchange::send_body() {
  body_started_ = true;
  for (;;) {
    http::BodyRead br = co_await down_.reader.read_body(io::Deadline::after(down_.listener.body_timeout));
    if (br.status != http::ReadStatus::kOk) {
      up_.close();
      if (br.status == http::ReadStatus::kTimeout) {
        ctx_.note = "client body timeout";
        co_return reply_with(408, true);
      }
      if (br.status == http::ReadStatus::kParseError) {
        int st = down_.reader.parser().error_status();
        ctx_.note = "bad request body: " + down_.reader.parser().error_detail();
        co_return reply_with(st != 0 ? st : 400, true);
      }
      ctx_.note = "client closed during the request body";
      co_return then(Next::kAbort);
    }
    for (auto c : br.chunks) ctx_.bytes_in += c.size();
    if (co_await write_body(up_, {}, br.chunks, chunked_request_, {}, io::Deadline::after(rcfg_.timeout))) {
      // The upstream stopped reading; it may have answered already (e.g. 413).
      have_head_ = true;
      hr_ = co_await up_reader_->read_head(io::Deadline::after(100ms), 100ms, nullptr);
      if (hr_.status == http::ReadStatus::kOk) co_return go_on();
      up_.close();
      cluster_.record_failure(*ep_);
      ctx_.note = "upstream closed while receiving the request body";
      co_return reply_with(502, true);
    }
    if (!br.done) continue;
    request_body_consumed_ = true;
    if (!chunked_request_) co_return go_on();
    std::string tail = request_last_chunk();
    if (auto ec = co_await up_.write_all(tail, io::Deadline::after(rcfg_.timeout))) {
      up_.close();
      ctx_.note = "upstream write failed: " + ec.message();
      co_return reply_with(502, true);
    }
    co_return go_on();
  }
}

// Reads response heads until a final one (or a 101 the route allows), relaying 1xx.
exec::Task<Verdict> Exchange::read_final_head() {
  for (;;) {
    if (!have_head_) {
      // The request has just been sent: its response cannot be there yet.
      hr_ = co_await up_reader_->read_head(io::Deadline::after(rcfg_.timeout), rcfg_.timeout, &down_.client,
                                           /*wait_first=*/true);
    }
    have_head_ = false;
    if (Verdict v = judge_head_read(); v.next != Next::kGoOn) co_return v;
    http::ResponseHead& resp = up_reader_->parser().response();
    if (!head_time_recorded_) {  // the first head (a 1xx counts: the upstream answered)
      head_time_recorded_ = true;
      cluster_.stats().response_head_time.observe(static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(exec::tick_now() - sent_at_).count()));
    }
    if (resp.status == 101) {
      if (upgrade_matches(resp, upgrade_)) {
        upgraded_ = true;
        co_return go_on();
      }
      // A switch nobody asked for (or to a protocol the route does not allow): relaying
      // it would hand the connection to a protocol that bypasses routing and limits.
      up_.close();
      gw_.stats().upgrades_unexpected.fetch_add(1, std::memory_order_relaxed);
      cluster_.record_failure(*ep_);
      ctx_.note = "upstream switched protocols without an allowed Upgrade";
      co_return reply_with(502, true);
    }
    if (!resp.is_informational()) co_return go_on();
    if (!co_await response_.send_interim(resp)) {
      up_.close();
      co_return then(Next::kAbort);
    }
    auto fin = co_await up_reader_->read_body(io::Deadline::after(rcfg_.timeout));
    if (fin.status != http::ReadStatus::kOk) {
      up_.close();
      ctx_.note = "upstream broke after an interim response";
      co_return reply_with(502, true);
    }
  }
}

Verdict Exchange::judge_head_read() {
  switch (hr_.status) {
    case http::ReadStatus::kOk:
      if (reused_ && replayable_ && up_reader_->parser().response().status == 408) {
        // A 408 on a reused connection is the upstream timing out the idle connection,
        // sent before our request reached it (RFC 9110 15.5.9 lets the client repeat the
        // request; Go's transport does the same).
        return then(Next::kReplay);
      }
      return go_on();
    case http::ReadStatus::kPeerGone:
      up_.close();  // the client left: abandon the upstream exchange
      ctx_.note = "client closed while waiting for the upstream";
      return then(Next::kAbort);
    case http::ReadStatus::kTimeout:
      up_.close();
      ep_->stats().timeouts.fetch_add(1, std::memory_order_relaxed);
      cluster_.stats().timeouts.fetch_add(1, std::memory_order_relaxed);
      gw_.stats().upstream_timeouts.fetch_add(1, std::memory_order_relaxed);
      cluster_.record_failure(*ep_);
      if (resendable() && can_retry(retry_on(rcfg_, config::RetryOn::kTimeout))) return then(Next::kRetry);
      ctx_.note = "upstream response timeout";
      return reply_with(504, false);
    case http::ReadStatus::kClosed:
    case http::ReadStatus::kIoError:
      up_.close();
      if (reused_ && !hr_.partial && (idempotent_ || !has_body_) && !body_started_) return then(Next::kReplay);
      cluster_.record_failure(*ep_);
      if (resendable() && !hr_.partial && can_retry(retry_on(rcfg_, config::RetryOn::kReset))) {
        return then(Next::kRetry);
      }
      ctx_.note = "upstream closed the connection before responding";
      return reply_with(502, false);
    case http::ReadStatus::kParseError:
      break;
  }
  up_.close();
  cluster_.record_failure(*ep_);
  ctx_.note = up_reader_->parser().error_detail();
  return reply_with(502, false);
}

Verdict Exchange::judge_final() {
  const http::ResponseHead& resp = up_reader_->parser().response();
  // A final response to an Upgrade request: no switch, the client connection stays HTTP.
  if (!upgraded_) down_.reader.parser().refuse_upgrade();
  ep_->stats().count_response(resp.status);
  if (resp.status < 500) {
    cluster_.record_success(*ep_);
    return go_on();
  }
  cluster_.record_failure(*ep_);
  // 5xx retries: resendable requests only.
  const bool gw_err = resp.status == 502 || resp.status == 503 || resp.status == 504;
  if (resendable() && can_retry(retry_on(rcfg_, config::RetryOn::k5xx) ||
                               (gw_err && retry_on(rcfg_, config::RetryOn::kGatewayError)))) {
    up_.close();
    return then(Next::kRetry);
  }
  return go_on();
}

exec::Task<Verdict> Exchange::relay_response() {
  const http::ResponseHead& resp = up_reader_->parser().response();
  ctx_.status = resp.status;
  if (upgraded_) {
    co_await response_.switch_protocols(resp, up_, up_reader_->buffered(), ctx_);
    up_.close();
    co_return then(Next::kDone);
  }
  response_.start(resp, req_.keep_alive && request_body_consumed_ && !down_.draining && !gw_.draining());
  // A big Content-Length body passes through the kernel where it can (relay_rest).
  // Otherwise a body that came with its head is topped up: the loop's first write holds
  // both (post16k and 64k measured 10-18% less proxy CPU per request: half as many sends).
  bool pass_through = resp.body == http::BodyKind::kContentLength && resp.content_length >= kPassThroughMin &&
                      response_.can_relay_body(up_);
  if (!pass_through) up_reader_->top_up(resp.body);
  for (http::BodyRead br = up_reader_->buffered_body();;) {
    if (br.status != http::ReadStatus::kOk) {
      co_return co_await upstream_broke(br.status == http::ReadStatus::kTimeout);
    }
    for (auto c : br.chunks) ctx_.bytes_out += c.size();
    if (br.done) down_.release_admission();  // the upstream is done: only the client write is left
    if (pass_through && !br.done) {
      pass_through = false;  // tried once: unavailable means the usual reads from here on
      if (std::optional<Verdict> v = co_await relay_rest(br.chunks)) co_return *v;
    }
    if (co_await response_.send_body(br.chunks, br.done, up_reader_->parser().trailers())) {
      co_return client_write_failed();
    }
    if (br.done) break;
    br = co_await up_reader_->read_body(io::Deadline::after(rcfg_.timeout));
  }
  co_return release_upstream();
}

exec::Task<std::optional<Verdict>> Exchange::relay_rest(std::span<const std::string_view> pieces) {
  const http::ResponseHead& resp = up_reader_->parser().response();
  const uint64_t rest = resp.content_length - up_reader_->parser().body_bytes_total();
  using Failed = io::SpliceResult::Failed;
  const io::SpliceResult r =
      co_await response_.relay_body(up_, pieces, rest, rcfg_.timeout, [this] { down_.release_admission(); });
  if (r.failed == Failed::kUnavailable) co_return std::nullopt;
  ctx_.bytes_out += r.moved;
  cluster_.stats().response_bytes_spliced.fetch_add(r.moved, std::memory_order_relaxed);
  if (r.failed == Failed::kSource) co_return co_await upstream_broke(r.ec == std::errc::timed_out);
  if (r.failed == Failed::kSink) co_return client_write_failed();
  co_return release_upstream();  // (the reader's parser never saw the spliced bytes: it goes)
}

exec::Task<Verdict> Exchange::upstream_broke(bool timed_out) {
  // Mid-body failure: the client must not see a complete-looking response.
  if (timed_out) {
    gw_.stats().upstream_timeouts.fetch_add(1, std::memory_order_relaxed);
    ctx_.note = "upstream body timeout";
  } else {
    ctx_.note = "upstream broke mid-body";
  }
  co_await response_.abandon();
  up_.close();
  co_return then(Next::kAbort);
}

Verdict Exchange::client_write_failed() {
  up_.close();
  if (!response_.head_sent()) ctx_.status = 0;
  ctx_.note = response_.head_sent() ? "client write failed mid-body" : "client write failed";
  return then(Next::kAbort);
}

Verdict Exchange::release_upstream() {
  // Reuse the upstream connection only after a cleanly framed exchange.
  const http::ResponseHead& resp = up_reader_->parser().response();
  if (resp.keep_alive && resp.body != http::BodyKind::kUntilClose && request_body_consumed_ &&
      !up_reader_->has_buffered()) {
    up_reader_.reset();
    ep_->pool().release(std::move(up_));
  } else {
    up_.close();
  }
  return then(Next::kDone);
}

}  // namespace

exec::Task<ForwardResult> forward(Gateway& gw, const Snapshot& snap, const routing::CompiledRoute& route,
                                  Downstream& down, RequestContext& ctx) {
  Exchange ex(gw, snap, route, down, ctx);
  co_return co_await ex.run();
}

}  // namespace sg::proxy
