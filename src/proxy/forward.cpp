// One proxied exchange: pick an endpoint, get a connection (pooled or new), send the
// request head, stream the request body, read the response head (relaying 1xx), stream the
// response body back, then decide whether either connection can be reused.
//
// Failure policy:
//   * connect failures: retried on another endpoint (nothing was sent), when configured;
//   * a pooled connection that turns out dead before any response byte (write fails, or
//     EOF): retried on a fresh connection once, for idempotent requests or when the
//     failure hit before the request was fully sent;
//   * 5xx / gateway errors / resets / timeouts: retried only for idempotent requests without
//     a body, when configured, within the cluster's retry budget;
//   * once a response byte went to the client, no retry: an upstream that dies mid-body
//     makes us close the client connection (never a fake complete response).
#include <array>
#include <charconv>
#include <cstring>

#include "common/log.h"
#include "http/serialize.h"
#include "proxy/exchange.h"
#include "proxy/headers.h"
#include "proxy/local_reply.h"

namespace sg::proxy {

namespace {

using namespace std::chrono_literals;

// How long we wait for an upstream's 100 Continue before sending the body anyway (what
// curl and others do when the next hop ignores Expect).
constexpr auto kExpectContinueWait = 1s;
const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

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

// Writes decoded body pieces to `dst`, framed as chunks when `chunked`, after `prefix`
// (a message head not sent yet) and before `suffix` (the last chunk), so that a small
// response leaves in one gathered write instead of two or three.
exec::Task<std::error_code> write_body(io::Stream& dst, std::string_view prefix,
                                       std::span<const std::string_view> pieces, bool chunked,
                                       std::string_view suffix, io::Deadline dl) {
  constexpr std::size_t kGroup = 32;
  std::array<std::string_view, kGroup * 3 + 2> bufs;
  std::array<std::array<char, 20>, kGroup> size_lines;
  for (std::size_t i = 0; i == 0 || i < pieces.size(); i += kGroup) {
    std::size_t n = 0;
    if (i == 0 && !prefix.empty()) bufs[n++] = prefix;
    for (std::size_t k = i; k < pieces.size() && k < i + kGroup; ++k) {
      std::string_view p = pieces[k];
      if (p.empty()) continue;
      if (chunked) {
        std::string line;
        http::append_chunk_size(line, p.size());
        auto& sl = size_lines[k - i];
        std::memcpy(sl.data(), line.data(), line.size());
        bufs[n++] = std::string_view(sl.data(), line.size());
        bufs[n++] = p;
        bufs[n++] = "\r\n";
      } else {
        bufs[n++] = p;
      }
    }
    if (i + kGroup >= pieces.size() && !suffix.empty()) bufs[n++] = suffix;
    if (n == 0) continue;
    if (auto ec = co_await dst.write_all(std::span<const std::string_view>(bufs.data(), n), dl)) co_return ec;
  }
  co_return std::error_code{};
}

std::string last_chunk(const http::HeaderMap& trailers, bool forward_trailers) {
  std::string out = "0\r\n";
  if (forward_trailers) {
    for (const auto& t : trailers) {
      // Never let a trailer smuggle framing or routing fields (RFC 9110 §6.5.1).
      if (http::iequals(t.name, "content-length") || http::iequals(t.name, "transfer-encoding") ||
          http::iequals(t.name, "host") || http::iequals(t.name, "connection") || http::iequals(t.name, "trailer")) {
        continue;
      }
      out += t.name + ": " + t.value + "\r\n";
    }
  }
  out += "\r\n";
  return out;
}

bool retry_on(const config::RouteSection& r, config::RetryOn what) {
  for (auto o : r.retries.on) {
    if (o == what) return true;
  }
  return false;
}

// Retry budget (Envoy's): retries in flight may not exceed budget_percent of the requests
// in flight, with a floor of min_retry_concurrency, so retries cannot amplify an outage.
class RetryBudget {
 public:
  RetryBudget(upstream::Cluster& c, const config::RetrySection& r) : c_(c), r_(r) {}
  ~RetryBudget() {
    if (holding_) c_.stats().retries_in_flight.fetch_sub(1, std::memory_order_relaxed);
  }
  bool try_take() {
    auto& s = c_.stats();
    int64_t active = s.active.load(std::memory_order_relaxed);
    int64_t allowed = std::max<int64_t>(r_.min_retry_concurrency, active * r_.budget_percent / 100);
    if (!holding_) {
      if (s.retries_in_flight.fetch_add(1, std::memory_order_relaxed) + 1 > allowed) {
        s.retries_in_flight.fetch_sub(1, std::memory_order_relaxed);
        s.retries_budget_exhausted.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
      holding_ = true;
    }
    s.retries.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

 private:
  upstream::Cluster& c_;
  const config::RetrySection& r_;
  bool holding_ = false;
};

struct InFlight {
  std::atomic<int64_t>& a;
  explicit InFlight(std::atomic<int64_t>& x) : a(x) { a.fetch_add(1, std::memory_order_relaxed); }
  ~InFlight() { a.fetch_sub(1, std::memory_order_relaxed); }
};

// Copies bytes one way until EOF, an error or `idle` without traffic. Used for tunnels.
exec::Task<void> pump(io::Stream& from, io::Stream& to, std::chrono::milliseconds idle, uint64_t* bytes) {
  std::array<char, 16 * 1024> buf;
  for (;;) {
    io::IoResult r = co_await from.read_some(buf, io::Deadline::after(idle));
    if (r.ec || r.n == 0) break;
    if (co_await to.write_all(std::string_view(buf.data(), r.n), io::Deadline::after(idle))) break;
    if (bytes != nullptr) *bytes += r.n;
  }
  to.shutdown_write();
}

exec::Task<void> tunnel(io::Stream& client, io::Stream& up, std::string_view client_leftover,
                        std::string_view up_leftover, std::chrono::milliseconds idle, RequestContext& ctx) {
  if (!up_leftover.empty() && co_await client.write_all(up_leftover, io::Deadline::after(idle))) co_return;
  if (!client_leftover.empty() && co_await up.write_all(client_leftover, io::Deadline::after(idle))) co_return;
  // One direction in its own task, the other here; the second to finish ends the tunnel.
  auto upstream_bound = exec::spawn(pump(client, up, idle, &ctx.bytes_in), {exec::TaskKind::kRequest, "upgrade tunnel"});
  co_await pump(up, client, idle, &ctx.bytes_out);
  co_await upstream_bound;
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
  if (std::error_code ec = co_await out.connect_tls(tls->ctx(), tls->server_name(ep.host()), dl)) {
    why = "upstream TLS handshake with " + ep.name() + " failed: " +
          (out.tls() != nullptr && !out.tls()->reason().empty() ? out.tls()->reason() : ec.message());
    SG_LOG_WARN("cluster {}: {}", cluster.name(), why);
    out.close();
    co_return ec;
  }
  co_return std::error_code{};
}

}  // namespace

exec::Task<bool> send_local(io::Stream& client, const std::string& bytes, const config::ListenerSection& l) {
  auto ec = co_await client.write_all(bytes, io::Deadline::after(l.send_timeout));
  co_return !ec;
}

exec::Task<ForwardResult> forward(Gateway& gw, const Snapshot& snap, const routing::CompiledRoute& route,
                                  Downstream& down, RequestContext& ctx) {
  http::RequestHead& req = down.reader.parser().request();
  const config::RouteSection& rcfg = *route.cfg;
  upstream::Cluster& cluster = *route.cluster;
  const config::ClusterSection& ccfg = cluster.config();
  ctx.cluster = cluster.name();
  GatewayStats& gs = gw.stats();
  io::IoContext ioc = gw.runtime().context();

  const bool idempotent = is_idempotent(req.method);
  const bool has_body = req.body != http::BodyKind::kNone;
  const bool client_http10 = req.is_http10();
  bool request_body_consumed = !has_body;  // the client's body was read to its end
  bool body_started = false;               // a body byte was read (the request cannot be replayed)
  bool sent_100 = false;                   // we (or the upstream via us) sent 100 Continue

  bool upgrade_refused = false;
  const std::string upgrade = allowed_upgrade(req, rcfg.upgrades, upgrade_refused);
  if (upgrade_refused) gs.upgrades_refused.fetch_add(1, std::memory_order_relaxed);
  if (upgrade.empty()) down.reader.parser().refuse_upgrade();
  ForwardInfo info{ctx.client_ip, ctx.request_id, ctx.tls != nullptr ? "https" : "http", upgrade};
  std::string head_bytes;
  append_upstream_request_head(head_bytes, req, rewritten_target(req, rcfg), &rcfg, info);

  uint64_t hash = 0;
  if (ccfg.lb == config::LbPolicy::kRingHash) {
    const std::string* hv = ccfg.hash_header.empty() ? nullptr : req.headers.get(ccfg.hash_header);
    hash = upstream::hash64(hv != nullptr ? std::string_view(*hv) : std::string_view(ctx.client_ip));
  }

  InFlight cluster_active(cluster.stats().active);
  RetryBudget budget(cluster, rcfg.retries);
  const uint32_t max_attempts = 1 + rcfg.retries.attempts;
  int exclude = -1;
  // Endpoints whose connect failed for this request, and how many attempts went to such
  // retries: a connect failure never reached an upstream, so trying every other endpoint
  // once is always safe (nginx's default too); it counts against the retry budget, not
  // against `retries.attempts`, which bounds retries of requests an upstream has seen.
  uint64_t connect_failed = 0;
  uint32_t connect_retries = 0;
  bool fresh_only = false;  // a pooled connection just failed: use a new one

  // ctx.note is set by the caller (no class-type temporaries into coroutines: exec/coro.h).
  auto reply = [&](int status, bool close) -> exec::Task<ForwardResult> {
    ctx.status = status;
    gs.local_replies.fetch_add(1, std::memory_order_relaxed);
    LocalReply lr;
    if (status == 503) lr = service_unavailable(snap.config->limits);
    lr.status = status;
    lr.close = close || !request_body_consumed;
    lr.head = req.is_head();
    std::string bytes = render_local_reply(lr);
    down.release_admission();  // no upstream is involved any more
    bool ok = co_await send_local(down.client, bytes, down.listener);
    co_return ForwardResult{ok && !lr.close};
  };

  // Body bytes that arrived with the head go upstream in the same write as the head (and,
  // when the whole body is here, with its last chunk). They stay valid views into the
  // client reader until its next read, so a retry can still replay them.
  http::BodyRead early_body;
  std::string early_tail;
  const bool chunked_request = req.body == http::BodyKind::kChunked;
  if (has_body && !req.expect_continue) {
    // A small body that came with the head leaves with it: one write upstream, not two.
    // (Not done for responses: upstreams tend to write head and body separately, and the
    // extra read mostly found nothing: post16k measured one recv more, one sendmsg less.)
    down.reader.top_up(req.body);
    early_body = down.reader.buffered_body();
    if (early_body.status != http::ReadStatus::kOk) {
      int st = down.reader.parser().error_status();
      ctx.note = "bad request body: " + down.reader.parser().error_detail();
      co_return co_await reply(st != 0 ? st : 400, true);
    }
    for (auto c : early_body.chunks) ctx.bytes_in += c.size();
    if (early_body.done) {
      request_body_consumed = true;
      if (chunked_request) early_tail = last_chunk(down.reader.parser().trailers(), true);
    }
  }

  for (uint32_t attempt = 0;; ++attempt) {
    ctx.attempts = static_cast<int>(attempt + 1);
    int idx = -1;
    upstream::Endpoint* ep = cluster.pick(upstream::PickContext{hash, exclude, connect_failed}, &idx);
    if (ep == nullptr) {
      ctx.note = "no healthy upstream";
      co_return co_await reply(503, false);
    }
    ctx.endpoint = ep->name();
    InFlight ep_active(ep->active);
    ep->stats().requests.fetch_add(1, std::memory_order_relaxed);
    gs.upstream_requests.fetch_add(1, std::memory_order_relaxed);
    cluster.stats().requests.fetch_add(1, std::memory_order_relaxed);

    auto can_retry = [&](bool cond) {
      return cond && attempt - connect_retries + 1 < max_attempts && budget.try_take();
    };

    // --- connection ---
    // Replayable on a new connection if this one was closed under it: the condition of the
    // replay below (a body must have come whole with the head: a streamed one cannot be resent).
    const bool replayable = (idempotent || !has_body) && !body_started && request_body_consumed;
    std::optional<io::Stream> pooled = fresh_only ? std::nullopt : ep->pool().acquire(replayable);
    fresh_only = false;
    const bool reused = pooled.has_value();
    io::Stream up;
    // The reused connection turned out closed by the upstream before it answered: the same
    // request goes out once more on a new connection (a replay, not a retry: the upstream
    // never saw it). The caller continues with the next attempt.
    auto replay_on_new_connection = [&] {
      up.close();
      fresh_only = true;
      cluster.stats().stale_replays.fetch_add(1, std::memory_order_relaxed);
      --attempt;
    };
    if (reused) {
      up = std::move(*pooled);
    } else {
      std::string why;
      std::error_code cec = co_await open_upstream(ioc, cluster, *ep, up, ccfg.connect_timeout, why);
      if (cec) {
        bool timed_out = cec == std::errc::timed_out;
        ep->stats().connect_errors.fetch_add(1, std::memory_order_relaxed);
        cluster.stats().connect_errors.fetch_add(1, std::memory_order_relaxed);
        gs.upstream_connect_errors.fetch_add(1, std::memory_order_relaxed);
        cluster.record_failure(*ep);
        connect_failed |= upstream::endpoint_bit(idx);
        if (!body_started && retry_on(rcfg, config::RetryOn::kConnectFailure) &&
            cluster.has_available(connect_failed) && budget.try_take()) {
          ++connect_retries;
          exclude = idx;
          continue;
        }
        ctx.note = why;
        co_return co_await reply(timed_out ? 504 : 502, false);
      }
    }

    // --- request head ---
    const auto sent_at = exec::tick_now();
    bool head_time_recorded = false;
    io::Deadline send_dl = io::Deadline::after(rcfg.timeout);
    if (auto ec = co_await write_body(up, head_bytes, early_body.chunks, chunked_request, early_tail, send_dl)) {
      up.close();
      if (reused && !body_started) {
        replay_on_new_connection();
        continue;
      }
      cluster.record_failure(*ep);
      {
        ctx.note = "upstream write failed: " + ec.message();
        co_return co_await reply(502, false);
      }
    }

    http::ParserLimits up_limits;
    up_limits.max_header_bytes = 64 * 1024;
    up_limits.max_headers = 200;
    http::MessageReader up_reader(up, http::Parser::Mode::kResponse, up_limits);
    up_reader.parser().expect_no_body(req.is_head());

    // --- Expect: 100-continue: give the upstream a moment to accept or refuse ---
    bool have_head = false;
    http::HeadRead hr;
    if (req.expect_continue && has_body && !client_http10) {
      hr = co_await up_reader.read_head(io::Deadline::after(kExpectContinueWait), rcfg.timeout, &down.client,
                                        /*wait_first=*/true);
      if (hr.status == http::ReadStatus::kTimeout && !hr.partial) {
        // The upstream does not do 100-continue: let the client send the body anyway.
        if (!co_await send_local(down.client, kContinue, down.listener)) co_return ForwardResult{false};
        sent_100 = true;
      } else if (hr.status == http::ReadStatus::kOk && up_reader.parser().response().status == 100) {
        if (!co_await send_local(down.client, kContinue, down.listener)) co_return ForwardResult{false};
        sent_100 = true;
        auto fin = co_await up_reader.read_body(io::Deadline::after(rcfg.timeout));  // completes the 1xx message
        if (fin.status != http::ReadStatus::kOk) {
          up.close();
          {
            ctx.note = "upstream broke after 100 Continue";
            co_return co_await reply(502, true);
          }
        }
      } else {
        have_head = true;  // a final response (or an error) before the body: handled below
      }
    }

    // --- request body (what did not come with the head) ---
    if (has_body && !have_head && !request_body_consumed) {
      body_started = true;
      const bool chunked = chunked_request;
      for (;;) {
        http::BodyRead br = co_await down.reader.read_body(io::Deadline::after(down.listener.body_timeout));
        if (br.status != http::ReadStatus::kOk) {
          up.close();
          if (br.status == http::ReadStatus::kTimeout) {
            ctx.note = "client body timeout";
            co_return co_await reply(408, true);
          }
          if (br.status == http::ReadStatus::kParseError) {
            int st = down.reader.parser().error_status();
            {
              ctx.note = "bad request body: " + down.reader.parser().error_detail();
              co_return co_await reply(st != 0 ? st : 400, true);
            }
          }
          ctx.note = "client closed during the request body";
          co_return ForwardResult{false};
        }
        for (auto c : br.chunks) ctx.bytes_in += c.size();
        if (auto ec = co_await write_body(up, {}, br.chunks, chunked, {}, io::Deadline::after(rcfg.timeout))) {
          // The upstream stopped reading; it may have answered already (e.g. 413).
          have_head = true;
          hr = co_await up_reader.read_head(io::Deadline::after(100ms), 100ms, nullptr);
          if (hr.status != http::ReadStatus::kOk) {
            up.close();
            cluster.record_failure(*ep);
            {
              ctx.note = "upstream closed while receiving the request body";
              co_return co_await reply(502, true);
            }
          }
          break;
        }
        if (br.done) {
          request_body_consumed = true;
          if (chunked) {
            std::string tail = last_chunk(down.reader.parser().trailers(), true);
            if (auto ec = co_await up.write_all(tail, io::Deadline::after(rcfg.timeout))) {
              up.close();
              {
                ctx.note = "upstream write failed: " + ec.message();
                co_return co_await reply(502, true);
              }
            }
          }
          break;
        }
      }
    }

    // --- response head(s) ---
    bool upgraded = false;
    for (;;) {
      if (!have_head) {
        // The request has just been sent: its response cannot be there yet.
        hr = co_await up_reader.read_head(io::Deadline::after(rcfg.timeout), rcfg.timeout, &down.client,
                                          /*wait_first=*/true);
      }
      have_head = false;
      if (hr.status == http::ReadStatus::kPeerGone) {
        up.close();  // the client left: abandon the upstream exchange
        ctx.note = "client closed while waiting for the upstream";
        co_return ForwardResult{false};
      }
      if (hr.status == http::ReadStatus::kTimeout) {
        up.close();
        ep->stats().timeouts.fetch_add(1, std::memory_order_relaxed);
        cluster.stats().timeouts.fetch_add(1, std::memory_order_relaxed);
        gs.upstream_timeouts.fetch_add(1, std::memory_order_relaxed);
        cluster.record_failure(*ep);
        if (idempotent && !has_body && can_retry(retry_on(rcfg, config::RetryOn::kTimeout))) {
          exclude = idx;
          goto next_attempt;
        }
        {
          ctx.note = "upstream response timeout";
          co_return co_await reply(504, false);
        }
      }
      if (hr.status == http::ReadStatus::kClosed || hr.status == http::ReadStatus::kIoError) {
        up.close();
        if (reused && !hr.partial && (idempotent || !has_body) && !body_started) {
          replay_on_new_connection();
          goto next_attempt;
        }
        cluster.record_failure(*ep);
        if (idempotent && !has_body && !hr.partial && can_retry(retry_on(rcfg, config::RetryOn::kReset))) {
          exclude = idx;
          goto next_attempt;
        }
        {
          ctx.note = "upstream closed the connection before responding";
          co_return co_await reply(502, false);
        }
      }
      if (hr.status == http::ReadStatus::kOk && reused && replayable && up_reader.parser().response().status == 408) {
        // A 408 on a reused connection is the upstream timing out the idle connection, sent
        // before our request reached it (RFC 9110 15.5.9 lets the client repeat the request;
        // Go's transport does the same): replay once on a new connection.
        replay_on_new_connection();
        goto next_attempt;
      }
      if (hr.status == http::ReadStatus::kParseError) {
        up.close();
        cluster.record_failure(*ep);
        {
          ctx.note = up_reader.parser().error_detail();
          co_return co_await reply(502, false);
        }
      }
      http::ResponseHead& resp = up_reader.parser().response();
      if (!head_time_recorded) {  // the first head (a 1xx counts: the upstream answered)
        head_time_recorded = true;
        cluster.stats().response_head_time.observe(static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(exec::tick_now() - sent_at).count()));
      }
      if (resp.status == 101) {
        if (upgrade_matches(resp, upgrade)) {
          upgraded = true;
          break;
        }
        // A switch nobody asked for (or to a protocol the route does not allow): relaying
        // it would hand the connection to a protocol that bypasses routing and limits.
        up.close();
        gs.upgrades_unexpected.fetch_add(1, std::memory_order_relaxed);
        cluster.record_failure(*ep);
        ctx.note = "upstream switched protocols without an allowed Upgrade";
        co_return co_await reply(502, true);
      }
      if (resp.is_informational()) {
        // Relay 1xx to HTTP/1.1 clients (never to 1.0 ones); we already sent our own 100.
        if (!client_http10 && !(resp.status == 100 && sent_100)) {
          std::string h;
          http::HeaderMap fields = resp.headers;
          strip_hop_by_hop(fields);
          http::append_response_head(h, 1, resp.status, resp.reason, fields);
          if (!co_await send_local(down.client, h, down.listener)) {
            up.close();
            co_return ForwardResult{false};
          }
        }
        auto fin = co_await up_reader.read_body(io::Deadline::after(rcfg.timeout));
        if (fin.status != http::ReadStatus::kOk) {
          up.close();
          {
            ctx.note = "upstream broke after an interim response";
            co_return co_await reply(502, true);
          }
        }
        continue;
      }
      break;
    }

    {
      http::ResponseHead& resp = up_reader.parser().response();
      // A final response to an Upgrade request: no switch, the client connection stays HTTP.
      if (!upgraded) down.reader.parser().refuse_upgrade();
      // 5xx retries (idempotent, bodiless requests only: a streamed body is gone).
      if (resp.status >= 500 && idempotent && !has_body) {
        bool gw_err = resp.status == 502 || resp.status == 503 || resp.status == 504;
        if (can_retry(retry_on(rcfg, config::RetryOn::k5xx) ||
                      (gw_err && retry_on(rcfg, config::RetryOn::kGatewayError)))) {
          ep->stats().responses_5xx.fetch_add(1, std::memory_order_relaxed);
          cluster.record_failure(*ep);
          up.close();
          exclude = idx;
          goto next_attempt;
        }
      }
      if (resp.status >= 500) {
        ep->stats().responses_5xx.fetch_add(1, std::memory_order_relaxed);
        cluster.record_failure(*ep);
      } else {
        cluster.record_success(*ep);
      }

      // --- response to the client ---
      ctx.status = resp.status;
      const bool bodiless = resp.body == http::BodyKind::kNone;
      const bool chunked_up = resp.body == http::BodyKind::kChunked;
      const bool until_close = resp.body == http::BodyKind::kUntilClose;
      // Re-frame for the client: chunked stays chunked for 1.1; a close-delimited body is
      // chunked for 1.1 clients and close-delimited for 1.0 ones.
      const bool chunked_down = !upgraded && !bodiless && !client_http10 && (chunked_up || until_close);
      bool client_keep = !upgraded && req.keep_alive && !client_http10 && request_body_consumed &&
                         !down.draining && !gw.draining() && !(client_http10 && !bodiless);
      std::string head;
      append_client_response_head(head, resp, resp.reason.empty() ? http::reason_phrase(resp.status) : resp.reason,
                                  &rcfg, chunked_down, !client_keep, upgraded);
      if (upgraded) {
        if (auto ec = co_await down.client.write_all(head, io::Deadline::after(down.listener.send_timeout))) {
          up.close();
          ctx.status = 0;
          ctx.note = "client write failed";
          co_return ForwardResult{false};
        }
        std::string_view client_left = down.reader.buffered();
        std::string_view up_left = up_reader.buffered();
        co_await tunnel(down.client, up, client_left, up_left, down.listener.idle_timeout, ctx);
        up.close();
        co_return ForwardResult{false};
      }

      // The head leaves at once, together with whatever body bytes arrived with it (and
      // the last chunk, when that arrived too): one write for a small response. A body
      // still on its way never holds the head back (streaming responses).
      bool upstream_clean = true;
      bool head_sent = false;
      for (http::BodyRead br = up_reader.buffered_body();;) {
        if (br.status != http::ReadStatus::kOk) {
          // Mid-body failure: the client must not see a complete-looking response.
          upstream_clean = false;
          if (br.status == http::ReadStatus::kTimeout) {
            gs.upstream_timeouts.fetch_add(1, std::memory_order_relaxed);
            ctx.note = "upstream body timeout";
          } else {
            ctx.note = "upstream broke mid-body";
          }
          if (!head_sent) (void)co_await down.client.write_all(head, io::Deadline::after(down.listener.send_timeout));
          up.close();
          co_return ForwardResult{false};
        }
        for (auto c : br.chunks) ctx.bytes_out += c.size();
        std::string tail;
        if (br.done && chunked_down) tail = last_chunk(up_reader.parser().trailers(), chunked_up);
        if (br.done) down.release_admission();  // the upstream is done: only the client write is left
        if (!head_sent || !br.chunks.empty() || !tail.empty()) {
          if (auto ec = co_await write_body(down.client, head_sent ? std::string_view{} : head, br.chunks,
                                            chunked_down, tail, io::Deadline::after(down.listener.send_timeout))) {
            up.close();
            if (!head_sent) ctx.status = 0;
            ctx.note = head_sent ? "client write failed mid-body" : "client write failed";
            co_return ForwardResult{false};
          }
          head_sent = true;
        }
        if (br.done) break;
        br = co_await up_reader.read_body(io::Deadline::after(rcfg.timeout));
      }

      // Reuse the upstream connection only after a cleanly framed exchange.
      bool up_reusable = upstream_clean && resp.keep_alive && !until_close && request_body_consumed &&
                         !up_reader.has_buffered();
      if (up_reusable) {
        ep->pool().release(std::move(up));
      } else {
        up.close();
      }
      co_return ForwardResult{client_keep && !until_close};
    }

  next_attempt:;
  }
}

}  // namespace sg::proxy
