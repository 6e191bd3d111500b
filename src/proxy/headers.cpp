#include "proxy/headers.h"

#include <array>
#include <charconv>
#include <cstring>
#include <vector>
#include <random>

#include "http/serialize.h"

namespace sg::proxy {

namespace {

// The fields the proxy treats specially, recognised in one switch on the name's length and
// one comparison (this runs for every field of every message).
enum class Field : uint8_t {
  kOther,
  kConnection, kUpgrade, kHopByHop,  // hop-by-hop (RFC 9110 §7.6.1)
  kContentLength, kExpect, kRequestId, kForwardedFor, kForwardedProto, kForwardedHost, kVia, kHost, kDate,
  kForwarded,
};

// `lit` is lowercase; header names are tokens, for which `c | 0x20` lowercases letters and
// leaves '-' and digits alone.
bool is(std::string_view name, std::string_view lit) {
  for (std::size_t i = 0; i < lit.size(); ++i) {
    if (static_cast<char>(name[i] | 0x20) != lit[i]) return false;
  }
  return true;
}

Field classify(std::string_view n) {
  switch (n.size()) {
    case 2: return is(n, "te") ? Field::kHopByHop : Field::kOther;
    case 3: return is(n, "via") ? Field::kVia : Field::kOther;
    case 4: return is(n, "host") ? Field::kHost : is(n, "date") ? Field::kDate : Field::kOther;
    case 6: return is(n, "expect") ? Field::kExpect : Field::kOther;
    case 7: return is(n, "upgrade") ? Field::kUpgrade : is(n, "trailer") ? Field::kHopByHop : Field::kOther;
    case 9: return is(n, "forwarded") ? Field::kForwarded : Field::kOther;
    case 10: return is(n, "connection") ? Field::kConnection : is(n, "keep-alive") ? Field::kHopByHop : Field::kOther;
    case 12: return is(n, "x-request-id") ? Field::kRequestId : Field::kOther;
    case 14: return is(n, "content-length") ? Field::kContentLength : Field::kOther;
    case 15: return is(n, "x-forwarded-for") ? Field::kForwardedFor : Field::kOther;
    case 16:
      return is(n, "proxy-connection")   ? Field::kHopByHop
             : is(n, "x-forwarded-host") ? Field::kForwardedHost
                                         : Field::kOther;
    case 17:
      return is(n, "transfer-encoding")   ? Field::kHopByHop
             : is(n, "x-forwarded-proto") ? Field::kForwardedProto
                                          : Field::kOther;
    case 18: return is(n, "proxy-authenticate") ? Field::kHopByHop : Field::kOther;
    case 19: return is(n, "proxy-authorization") ? Field::kHopByHop : Field::kOther;
    default: return Field::kOther;
  }
}

bool is_hop_by_hop(Field f) { return f == Field::kConnection || f == Field::kUpgrade || f == Field::kHopByHop; }
bool is_hop_by_hop(std::string_view name) { return is_hop_by_hop(classify(name)); }

// Fields a client may not make us drop by naming them in Connection: the ones we own.
bool is_protected(std::string_view name) {
  switch (classify(name)) {
    case Field::kHost: case Field::kContentLength: case Field::kForwardedFor: case Field::kForwardedProto:
    case Field::kForwardedHost: case Field::kRequestId: case Field::kVia: case Field::kForwarded:
      return true;
    default:
      return false;
  }
}

// Field names a message's Connection header lists (other than fields we own): they are
// hop-by-hop too. Views into `headers`, which outlives the result.
class ConnectionNamed {
 public:
  explicit ConnectionNamed(const http::HeaderMap& headers) {
    for (const auto& f : headers) {
      if (f.name.size() != 10 || !is(f.name, "connection")) continue;  // (classify's answer, cheaper)
      http::for_each_list_item(f.value, [&](std::string_view tok) {
        // "close" / "keep-alive" / "upgrade" are the usual tokens and name nothing extra.
        if (!is_protected(tok) && !is_hop_by_hop(tok) && !http::iequals(tok, "close")) names_.push_back(tok);
        return true;
      });
    }
  }
  bool contains(std::string_view name) const {
    for (auto n : names_) {
      if (http::iequals(name, n)) return true;
    }
    return false;
  }

 private:
  std::vector<std::string_view> names_;  // empty (no allocation) in the common case
};

bool named_in(const std::vector<std::string>& names, std::string_view name) {
  for (const auto& n : names) {
    if (http::iequals(name, n)) return true;
  }
  return false;
}
bool named_in(const std::vector<std::pair<std::string, std::string>>& fields, std::string_view name) {
  for (const auto& [n, v] : fields) {
    if (http::iequals(name, n)) return true;
  }
  return false;
}

// Writes header lines into a head being built, applying the route's header operations
// on the way (remove, then set, then add: a removed or set name never passes through).
// A line grows the head once and is copied into it: four appends per line (name, ": ",
// value, CRLF) cost more than the bytes they copy.
class HeadWriter {
 public:
  HeadWriter(std::string& out, const config::HeaderOps* ops) : out_(out), ops_(ops) {}
  void field(std::string_view name, std::string_view value) {
    if (suppressed(name)) return;
    line(name, {}, value);
  }
  // A list field: what the message carried (`existing`, joined) plus our item.
  void list_field(std::string_view name, std::string_view existing, std::string_view item) {
    if (suppressed(name)) return;
    line(name, existing, item);
  }
  // Adds the route's set and add fields and the empty line; the head is then complete.
  void finish() {
    if (ops_ != nullptr) {
      for (const auto& [k, v] : ops_->set) line(k, {}, v);
      for (const auto& [k, v] : ops_->add) line(k, {}, v);
    }
    out_.append("\r\n");
  }

 private:
  // "name: [existing, ]value" CRLF.
  void line(std::string_view name, std::string_view existing, std::string_view value) {
    const std::size_t at = out_.size();
    out_.resize(at + name.size() + existing.size() + value.size() + (existing.empty() ? 4 : 6));
    char* p = copy(out_.data() + at, name);
    *p++ = ':';
    *p++ = ' ';
    if (!existing.empty()) {
      p = copy(p, existing);
      *p++ = ',';
      *p++ = ' ';
    }
    p = copy(p, value);
    *p++ = '\r';
    *p = '\n';
  }
  static char* copy(char* to, std::string_view s) {
    if (!s.empty()) std::memcpy(to, s.data(), s.size());  // (an empty view's data may be null)
    return to + s.size();
  }
  bool suppressed(std::string_view name) const {
    return ops_ != nullptr && (named_in(ops_->remove, name) || named_in(ops_->set, name));
  }
  std::string& out_;
  const config::HeaderOps* ops_;
};

// Room for a head: the fields we pass on, plus what we add (one allocation per head).
std::size_t head_size_estimate(const http::HeaderMap& h) {
  std::size_t n = 256;
  for (const auto& f : h) n += f.name.size() + f.value.size() + 4;
  return n;
}

void append_to(std::string& list, std::string_view value) {
  if (!list.empty()) list += ", ";
  list += value;
}

}  // namespace

void strip_hop_by_hop(http::HeaderMap& h) {
  ConnectionNamed named(h);
  // One pass; `named` holds views into Connection values, which are removed in the same
  // pass: decide with a copy of the verdicts taken before anything moves.
  std::vector<bool> drop;
  drop.reserve(h.size());
  for (const auto& f : h) drop.push_back(is_hop_by_hop(classify(f.name)) || named.contains(f.name));
  std::size_t i = 0;
  h.remove_if([&](const http::Header&) { return drop[i++]; });
}

void append_upstream_request_head(std::string& out, const http::RequestHead& req, std::string_view target,
                                  const config::RouteSection* route, const ForwardInfo& info) {
  out.reserve(out.size() + req.method.size() + target.size() + head_size_estimate(req.headers));
  out += req.method;
  out += ' ';
  out += target;
  out += " HTTP/1.1\r\n";
  HeadWriter w(out, route != nullptr ? &route->request_headers : nullptr);
  const bool rewrite_host = route != nullptr && !route->rewrite_host.empty();
  ConnectionNamed named(req.headers);
  std::string xff, xfp, xfh, via;
  bool has_host = false;
  for (const auto& f : req.headers) {
    const std::string_view n = f.name;
    const Field kind = classify(n);
    switch (kind) {
      case Field::kConnection: case Field::kUpgrade: case Field::kHopByHop:
      // Framing and the request id are ours.
      case Field::kContentLength: case Field::kExpect: case Field::kRequestId:
        continue;
      // The client's values of list fields are kept (joined) in front of ours.
      case Field::kForwardedFor: append_to(xff, f.value); continue;
      case Field::kForwardedProto: append_to(xfp, f.value); continue;
      case Field::kForwardedHost: append_to(xfh, f.value); continue;
      case Field::kVia: append_to(via, f.value); continue;
      case Field::kHost:
        if (rewrite_host) continue;
        has_host = true;
        break;
      default:
        if (named.contains(n)) continue;
        break;
    }
    w.field(n, f.value);
  }
  if (req.body == http::BodyKind::kContentLength) {
    char num[24];
    auto [end, ec] = std::to_chars(num, num + sizeof(num), req.content_length);
    (void)ec;
    w.field("Content-Length", std::string_view(num, static_cast<std::size_t>(end - num)));
  } else if (req.body == http::BodyKind::kChunked) {
    w.field("Transfer-Encoding", "chunked");
  } else if (req.method == "POST" || req.method == "PUT" || req.method == "PATCH") {
    w.field("Content-Length", "0");
  }
  if (req.expect_continue) w.field("Expect", "100-continue");
  if (!info.upgrade.empty()) {
    w.field("Connection", "upgrade");
    w.field("Upgrade", info.upgrade);
  }
  if (rewrite_host) {
    w.field("Host", route->rewrite_host);
  } else if (!has_host) {
    // An HTTP/1.0 request may come without Host; HTTP/1.1 needs one (RFC 9112 §3.2), or the
    // upstream must refuse it.
    w.field("Host", req.authority.empty() ? info.default_authority : std::string_view(req.authority));
  }
  w.list_field("X-Forwarded-For", xff, info.peer_ip);
  w.list_field("X-Forwarded-Proto", xfp, info.proto);
  if (!req.authority.empty()) w.list_field("X-Forwarded-Host", xfh, req.authority);
  else if (!xfh.empty()) w.field("X-Forwarded-Host", xfh);
  w.list_field("Via", via, req.is_http10() ? "1.0 stealgate" : "1.1 stealgate");
  w.field("X-Request-Id", info.request_id);
  w.finish();
}

void append_client_response_head(std::string& out, const http::ResponseHead& resp, std::string_view reason,
                                 const config::RouteSection* route, bool chunked_to_client, bool close,
                                 bool upgrade) {
  out.reserve(out.size() + reason.size() + head_size_estimate(resp.headers));
  out += "HTTP/1.1 ";
  char num[24];
  auto [end, ec] = std::to_chars(num, num + sizeof(num), resp.status);
  (void)ec;
  out.append(num, static_cast<std::size_t>(end - num));
  out += ' ';
  out += reason;
  out += "\r\n";
  HeadWriter w(out, route != nullptr ? &route->response_headers : nullptr);
  ConnectionNamed named(resp.headers);
  const bool keep_cl = resp.body == http::BodyKind::kContentLength || resp.body == http::BodyKind::kNone;
  const bool cl_allowed = resp.status != 204 && !resp.is_informational();
  std::string via;
  std::string_view upgrade_proto;
  std::string_view content_length;
  bool has_date = false;
  for (const auto& f : resp.headers) {
    const std::string_view n = f.name;
    switch (classify(n)) {
      case Field::kUpgrade:
        if (upgrade && upgrade_proto.empty()) upgrade_proto = f.value;
        continue;
      case Field::kConnection: case Field::kHopByHop:
        continue;
      case Field::kContentLength:
        if (content_length.empty()) content_length = f.value;
        continue;
      case Field::kVia:
        append_to(via, f.value);
        continue;
      case Field::kDate:
        if (named.contains(n)) continue;
        has_date = true;
        break;
      default:
        if (named.contains(n)) continue;
        break;
    }
    w.field(n, f.value);
  }
  if (keep_cl && cl_allowed && !content_length.empty()) w.field("Content-Length", content_length);
  if (chunked_to_client) w.field("Transfer-Encoding", "chunked");
  if (!has_date) w.field("Date", http::http_date_now());
  w.list_field("Via", via, resp.version_minor == 0 ? "1.0 stealgate" : "1.1 stealgate");
  if (upgrade) {
    w.field("Connection", "upgrade");
    if (!upgrade_proto.empty()) w.field("Upgrade", upgrade_proto);
  } else if (close) {
    w.field("Connection", "close");
  }
  w.finish();
}

namespace {
// "websocket" of "WebSocket/13": the protocol name of an Upgrade list item.
std::string_view protocol_name(std::string_view item) { return item.substr(0, item.find('/')); }
}  // namespace

std::string allowed_upgrade(const http::RequestHead& req, const std::vector<std::string>& allowed, bool& refused) {
  std::string out;
  refused = false;
  if (!req.upgrade) return out;
  for (const auto& f : req.headers) {
    if (classify(f.name) != Field::kUpgrade) continue;
    http::for_each_list_item(f.value, [&](std::string_view item) {
      if (named_in(allowed, protocol_name(item))) {
        append_to(out, item);
      } else {
        refused = true;
      }
      return true;
    });
  }
  return out;
}

bool upgrade_matches(const http::ResponseHead& resp, std::string_view offered) {
  const std::string* to = resp.headers.get("upgrade");
  if (to == nullptr || offered.empty()) return false;
  bool match = false;
  http::for_each_list_item(offered, [&](std::string_view item) {
    match = http::iequals(protocol_name(item), protocol_name(http::trim_ows(*to)));
    return !match;
  });
  return match;
}

RequestId RequestId::for_request(const http::RequestHead& req) {
  RequestId out;
  if (const std::string* id = req.headers.get("x-request-id")) {
    bool sane = !id->empty() && id->size() <= 128;
    for (char c : *id) sane = sane && c > 0x20 && c < 0x7f;
    if (sane) {
      out.supplied_ = *id;
      return out;
    }
  }
  // splitmix64 (a per-thread counter through a strong mixer): ids must be unique, not
  // unpredictable (mt19937_64, used before, is no harder to predict), and this costs a
  // few instructions where the Mersenne Twister's state refills cost a hundred.
  thread_local uint64_t state = std::random_device{}() * 0x9e3779b97f4a7c15ULL ^ std::random_device{}();
  auto next = [] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  // Two hex digits per byte from a table: 16 small copies instead of 32 digit lookups.
  static constexpr auto kHexPairs = [] {
    std::array<char, 512> t{};
    constexpr char kHex[] = "0123456789abcdef";
    for (std::size_t b = 0; b < 256; ++b) {
      t[2 * b] = kHex[b >> 4];
      t[2 * b + 1] = kHex[b & 0xf];
    }
    return t;
  }();
  static_assert(kDigits == 2 * 8 * 2, "two 64-bit words, two digits per byte");
  const uint64_t words[2] = {next(), next()};
  char* to = out.generated_;
  for (uint64_t w : words) {
    for (std::size_t i = 0; i < 8; ++i, to += 2) std::memcpy(to, &kHexPairs[2 * ((w >> (8 * i)) & 0xff)], 2);
  }
  return out;
}

std::string last_chunk(const http::HeaderMap& trailers, const config::HeaderOps* ops, std::string_view owned) {
  std::string out = "0\r\n";
  HeadWriter w(out, ops);  // (leaves out what `ops` removes or sets; no finish(): nothing is added)
  for (const auto& t : trailers) {
    if (classify(t.name) == Field::kOther && !http::iequals(t.name, owned)) w.field(t.name, t.value);
  }
  out += "\r\n";
  return out;
}

bool is_idempotent(std::string_view m) {
  return m == "GET" || m == "HEAD" || m == "OPTIONS" || m == "TRACE" || m == "PUT" || m == "DELETE";
}

}  // namespace sg::proxy
