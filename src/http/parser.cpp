#include "http/parser.h"

#include <cstring>
#include <memory>

#include "common/thread_cache.h"

namespace sg::http {

namespace {

Parser* self(llhttp_t* p) { return static_cast<Parser*>(p->data); }

bool is_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != '\0';
}

// RFC 3986 host [ ":" port ]: reg-name / IPv4 / IP-literal characters only.
bool valid_authority(std::string_view a) {
  for (char c : a) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              std::strchr("-._~!$&'()*+,;=:[]%", c) != nullptr;
    if (!ok || c == '\0') return false;
  }
  return true;
}

}  // namespace

// One callback table for every parser (llhttp keeps a pointer to it; the callbacks find
// their Parser through llhttp_t::data): not a copy per connection.
const llhttp_settings_t& Parser::settings() {
  static const llhttp_settings_t table = [] {
    llhttp_settings_t s;
    llhttp_settings_init(&s);
    s.on_message_begin = &Parser::on_message_begin;
    s.on_url = &Parser::on_url;
    s.on_status = &Parser::on_status;
    s.on_header_field = &Parser::on_header_field;
    s.on_header_value = &Parser::on_header_value;
    s.on_header_value_complete = &Parser::on_header_value_complete;
    s.on_headers_complete = &Parser::on_headers_complete;
    s.on_body = &Parser::on_body;
    s.on_chunk_header = &Parser::on_chunk_header;
    s.on_chunk_extension_name = &Parser::on_chunk_extension;
    s.on_chunk_extension_value = &Parser::on_chunk_extension;
    s.on_message_complete = &Parser::on_message_complete;
    return s;
  }();
  return table;
}

Parser::Parser(Mode mode, const ParserLimits& limits) : mode_(mode), limits_(limits) {
  llhttp_init(&parser_, mode == Mode::kRequest ? HTTP_REQUEST : HTTP_RESPONSE, &settings());
  parser_.data = this;
}

void Parser::renew(Mode mode, const ParserLimits& limits) {
  // Every scalar back to its initial value in one assignment; the containers emptied in
  // place, so that their capacity survives. (Rebuilding the whole object instead, with the
  // containers moved out and back, cost 1.6% of a TLS keep-alive request's CPU.)
  static_cast<detail::ParserScalars&>(*this) = detail::ParserScalars{};
  mode_ = mode;
  limits_ = limits;
  req_.reset();
  resp_.reset();
  trailers_.clear();
  field_.clear();
  value_.clear();
  body_.clear();
  error_detail_.clear();
  copy_.clear();
  llhttp_init(&parser_, mode == Mode::kRequest ? HTTP_REQUEST : HTTP_RESPONSE, &settings());
  parser_.data = this;
}

bool Parser::oversized() const {
  constexpr std::size_t kFields = 64;
  constexpr std::size_t kString = 4096;
  return req_.headers.capacity() > kFields || resp_.headers.capacity() > kFields || trailers_.capacity() > kFields ||
         field_.text.capacity() > kString || value_.text.capacity() > kString || body_.capacity() > kFields ||
         req_.target.capacity() > kString || req_.path.capacity() > kString;
}

namespace {

// Parsers given back on this thread, for reuse (ParserRecycler; common/thread_cache.h).
void delete_parser(void* p) noexcept { delete static_cast<Parser*>(p); }
using Parsers = PerThreadCache<struct ParsersTag, 64, delete_parser>;

}  // namespace

std::size_t release_cached_parsers() noexcept { return Parsers::clear() * sizeof(Parser); }

ParserPtr acquire_parser(Parser::Mode mode, const ParserLimits& limits) {
  auto* p = static_cast<Parser*>(Parsers::take());
  if (p == nullptr) return ParserPtr(new Parser(mode, limits));
  p->renew(mode, limits);
  return ParserPtr(p);
}

void ParserRecycler::operator()(Parser* p) const noexcept {
  if (p->oversized()) {
    delete p;
    return;
  }
  std::string().swap(p->copy_);  // a copied body: not worth keeping
  if (!Parsers::keep(p)) delete p;
}

int Parser::fail(int status, std::string detail) {
  if (error_status_ == 0) {
    error_status_ = status;
    error_detail_ = std::move(detail);
  }
  return HPE_USER;
}

bool Parser::count_header_bytes(std::size_t n) {
  header_bytes_ += n;
  return header_bytes_ <= limits_.max_header_bytes;
}

int Parser::on_message_begin(llhttp_t* p) {
  Parser* s = self(p);
  s->req_.reset();
  s->resp_.reset();
  s->trailers_.clear();
  s->field_.clear();
  s->value_.clear();
  s->in_trailers_ = false;
  s->in_message_ = true;
  s->head_done_ = false;
  s->header_bytes_ = 0;
  s->body_total_ = 0;
  return 0;
}

int Parser::on_url(llhttp_t* p, const char* at, std::size_t n) {
  Parser* s = self(p);
  if (s->req_.target.size() + n > s->limits_.max_target_bytes) {
    return s->fail(414, "request-target longer than " + std::to_string(s->limits_.max_target_bytes) + " bytes");
  }
  s->req_.target.append(at, n);
  return 0;
}

int Parser::on_status(llhttp_t* p, const char* at, std::size_t n) {
  Parser* s = self(p);
  if (s->resp_.reason.size() + n > 1024) return s->fail(502, "upstream reason phrase too long");
  s->resp_.reason.append(at, n);
  return 0;
}

int Parser::on_header_field(llhttp_t* p, const char* at, std::size_t n) {
  Parser* s = self(p);
  if (!s->count_header_bytes(n)) {
    return s->fail(s->mode_ == Mode::kRequest ? 431 : 502, "header section larger than " +
                                                               std::to_string(s->limits_.max_header_bytes) + " bytes");
  }
  s->field_.add(at, n);
  return 0;
}

int Parser::on_header_value(llhttp_t* p, const char* at, std::size_t n) {
  Parser* s = self(p);
  if (!s->count_header_bytes(n)) {
    return s->fail(s->mode_ == Mode::kRequest ? 431 : 502, "header section larger than " +
                                                               std::to_string(s->limits_.max_header_bytes) + " bytes");
  }
  s->value_.add(at, n);
  return 0;
}

int Parser::on_header_value_complete(llhttp_t* p) {
  Parser* s = self(p);
  HeaderMap& target =
      s->in_trailers_ ? s->trailers_ : (s->mode_ == Mode::kRequest ? s->req_.headers : s->resp_.headers);
  if (target.size() + 1 > s->limits_.max_headers) {
    return s->fail(s->mode_ == Mode::kRequest ? 431 : 502,
                   "more than " + std::to_string(s->limits_.max_headers) + " header fields");
  }
  // Field lines count a little overhead each (": " and CRLF) towards the section limit.
  if (!s->count_header_bytes(4)) {
    return s->fail(s->mode_ == Mode::kRequest ? 431 : 502, "header section too large");
  }
  // Strict mode already rejects CR/LF/NUL and other controls; keep the guarantee here.
  // A head's lines were lexed (lex_in_line refuses NUL, and a line ends at its first CR
  // or LF), so only trailer fields, which are not, need the scan.
  const std::string_view value = s->value_.get();
  if (s->in_trailers_) {
    bool bad = false;  // (no early exit: the compiler vectorises the scan of a whole value)
    for (char c : value) bad |= (c == '\0') | (c == '\r') | (c == '\n');
    if (bad) return s->fail(s->mode_ == Mode::kRequest ? 400 : 502, "control character in header value");
  }
  target.add_copy(s->field_.get(), trim_ows(value));
  s->field_.clear();
  s->value_.clear();
  return 0;
}

int Parser::finish_request_head() {
  RequestHead& r = req_;
  r.method = llhttp_method_name(static_cast<llhttp_method_t>(parser_.method));
  r.version_major = parser_.http_major;
  r.version_minor = parser_.http_minor;
  if (r.version_major != 1) return fail(505, "HTTP version not supported");
  if (int rc = read_request_authority()) return rc;
  if (int rc = read_request_framing()) return rc;
  return read_connection_options();
}

int Parser::read_request_authority() {
  RequestHead& r = req_;
  // Host (RFC 9112 §3.2): exactly one on HTTP/1.1, valid characters.
  std::size_t hosts = r.headers.count("host");
  if (hosts > 1) return fail(400, "more than one Host header");
  if (hosts == 0 && r.version_minor >= 1) return fail(400, "missing Host header");
  if (hosts == 1) {
    const std::string& h = *r.headers.get("host");
    if (!valid_authority(h)) return fail(400, "invalid Host header");
    r.authority = h;
  }

  // Request-target forms (RFC 9112 §3.2).
  std::string_view t = r.target;
  if (r.method == "CONNECT") return fail(501, "CONNECT is not supported");
  // An upstream that answers TRACE (Apache does by default) echoes the request as it
  // arrived, with the fields stealgate added: a route's request_headers (an upstream
  // credential, say) and the client-certificate subject. nginx refuses TRACE too.
  if (r.method == "TRACE") return fail(501, "TRACE is not supported");
  // The grammar has no fragment, and upstream frameworks that cut one off (gunicorn, Node)
  // would serve /admin for "/admin#x", past a route that matched it as another path.
  if (t.find('#') != std::string_view::npos) return fail(400, "fragment in request-target");
  if (t == "*") {
    if (r.method != "OPTIONS") return fail(400, "asterisk-form target is only for OPTIONS");
    r.path = "*";
  } else if (!t.empty() && t.front() == '/') {
    split_path_and_query(t, r);
  } else {
    return read_absolute_form(t);
  }
  return 0;
}

void Parser::split_path_and_query(std::string_view pq, RequestHead& r) {
  std::size_t q = pq.find('?');
  r.path = std::string(pq.substr(0, q));
  if (q != std::string_view::npos) r.query = std::string(pq.substr(q + 1));
}

int Parser::read_absolute_form(std::string_view t) {
  RequestHead& r = req_;
  // absolute-form: the authority of the target wins over Host (RFC 9112 §3.2.2).
  std::size_t scheme_end = t.find("://");
  if (scheme_end == std::string_view::npos) return fail(400, "invalid request-target");
  std::string scheme = to_lower(t.substr(0, scheme_end));
  if (scheme != "http" && scheme != "https") return fail(400, "unsupported scheme in request-target");
  std::string_view rest = t.substr(scheme_end + 3);
  std::size_t slash = rest.find_first_of("/?");
  std::string_view auth = rest.substr(0, slash);
  if (auth.empty() || auth.find('@') != std::string_view::npos || !valid_authority(auth)) {
    return fail(400, "invalid authority in request-target");
  }
  r.authority = std::string(auth);
  std::string_view pq = slash == std::string_view::npos ? std::string_view("/") : rest.substr(slash);
  if (pq.front() == '?') {
    r.path = "/";
    r.query = std::string(pq.substr(1));
  } else {
    split_path_and_query(pq, r);
  }
  r.headers.set("Host", r.authority);
  return 0;
}

int Parser::read_request_framing() {
  RequestHead& r = req_;
  // Transfer-Encoding (RFC 9112 §6.1, §7): only a single "chunked".
  std::size_t te_lines = r.headers.count("transfer-encoding");
  if (te_lines > 0) {
    if (r.version_minor == 0) return fail(400, "Transfer-Encoding in an HTTP/1.0 request");
    if (te_lines > 1) return fail(400, "more than one Transfer-Encoding header");
    std::string_view te = trim_ows(*r.headers.get("transfer-encoding"));
    if (!iequals(te, "chunked")) {
      std::string_view last;
      for_each_list_item(te, [&](std::string_view item) {
        last = item;
        return true;
      });
      if (iequals(last, "chunked")) return fail(501, "transfer coding not implemented: " + std::string(te));
      return fail(400, "Transfer-Encoding does not end in chunked");
    }
  }
  if (parser_.flags & F_CHUNKED) {
    r.body = BodyKind::kChunked;
  } else if (parser_.flags & F_CONTENT_LENGTH) {
    r.content_length = parser_.content_length;
    r.body = r.content_length > 0 ? BodyKind::kContentLength : BodyKind::kNone;
    if (limits_.max_body_bytes != 0 && r.content_length > limits_.max_body_bytes) {
      return fail(413, "request body larger than " + std::to_string(limits_.max_body_bytes) + " bytes");
    }
  }
  return 0;
}

int Parser::read_connection_options() {
  RequestHead& r = req_;
  if (r.version_minor == 0) {
    r.keep_alive = r.headers.has_token("connection", "keep-alive");
  } else {
    r.keep_alive = !r.headers.has_token("connection", "close");
    if (const std::string* e = r.headers.get("expect")) {
      if (!iequals(trim_ows(*e), "100-continue")) return fail(417, "unsupported expectation");
      r.expect_continue = true;
    }
    r.upgrade = r.headers.contains("upgrade") && r.headers.has_token("connection", "upgrade");
  }
  // An Upgrade on an HTTP/1.0 request is ignored (RFC 9110 §7.8): llhttp must not switch.
  if (!r.upgrade) parser_.upgrade = parser_.method == HTTP_CONNECT;
  return 0;
}

int Parser::finish_response_head() {
  ResponseHead& r = resp_;
  r.status = parser_.status_code;
  r.version_major = parser_.http_major;
  r.version_minor = parser_.http_minor;
  if (r.version_major != 1) return fail(502, "upstream HTTP version not supported");
  // RFC 9110 §15: valid codes are 100-599; a client cannot even class a larger one.
  if (r.status < 100 || r.status > 599) return fail(502, "invalid upstream status code");
  if (r.headers.count("transfer-encoding") > 1) return fail(502, "conflicting upstream Transfer-Encoding");
  bool no_body = no_body_ || r.is_informational() || r.status == 204 || r.status == 304;
  if (parser_.flags & F_CONTENT_LENGTH) r.content_length = parser_.content_length;
  if (no_body) {
    r.body = BodyKind::kNone;
    // Also for 1xx: llhttp would otherwise read an interim response that carries
    // Transfer-Encoding as a body until close (a 101 that switches still switches: llhttp
    // checks the upgrade before F_SKIPBODY).
    parser_.flags |= F_SKIPBODY;
  } else if (const std::string* te = r.headers.get("transfer-encoding"); te && !iequals(trim_ows(*te), "chunked")) {
    // Transfer-Encoding is hop-by-hop and we re-frame the body: relaying any other coding
    // would hand the client coded bytes without the coding's name.
    return fail(502, "upstream transfer coding not supported: " + std::string(trim_ows(*te)));
  } else if (parser_.flags & F_CHUNKED) {
    r.body = BodyKind::kChunked;
  } else if (parser_.flags & F_CONTENT_LENGTH) {
    r.body = r.content_length > 0 ? BodyKind::kContentLength : BodyKind::kNone;
  } else {
    r.body = BodyKind::kUntilClose;
  }
  r.keep_alive = r.version_minor >= 1 ? !r.headers.has_token("connection", "close")
                                      : r.headers.has_token("connection", "keep-alive");
  if (r.body == BodyKind::kUntilClose) r.keep_alive = false;
  return 0;
}

int Parser::on_headers_complete(llhttp_t* p) {
  Parser* s = self(p);
  if (s->mode_ == Mode::kRequest && !s->version_syntax_ok_) {
    s->fail(400, "malformed HTTP version");
    return -1;
  }
  int rc = s->mode_ == Mode::kRequest ? s->finish_request_head() : s->finish_response_head();
  if (rc != 0) return -1;
  s->head_done_ = true;
  s->pause_event_ = ParseEvent::kHeadDone;
  return HPE_PAUSED;
}

int Parser::on_body(llhttp_t* p, const char* at, std::size_t n) {
  Parser* s = self(p);
  if (n == 0) return 0;  // llhttp reports empty spans for read-until-close bodies
  s->body_total_ += n;
  if (s->mode_ == Mode::kRequest && s->limits_.max_body_bytes != 0 && s->body_total_ > s->limits_.max_body_bytes) {
    return s->fail(413, "request body larger than " + std::to_string(s->limits_.max_body_bytes) + " bytes");
  }
  s->body_.emplace_back(at, n);
  return 0;
}

int Parser::on_chunk_header(llhttp_t* p) {
  Parser* s = self(p);
  s->chunk_ext_bytes_ = 0;
  if (p->content_length == 0) {
    // Last chunk: what follows is the trailer section, with its own size budget.
    s->in_trailers_ = true;
    s->header_bytes_ = 0;
  }
  return 0;
}

int Parser::on_chunk_extension(llhttp_t* p, const char*, std::size_t n) {
  Parser* s = self(p);
  s->chunk_ext_bytes_ += n;
  if (s->chunk_ext_bytes_ > s->limits_.max_chunk_ext_bytes) {
    return s->fail(s->mode_ == Mode::kRequest ? 400 : 502, "chunk extensions too long");
  }
  return 0;
}

int Parser::on_message_complete(llhttp_t* p) {
  Parser* s = self(p);
  s->in_message_ = false;
  // The next message's head starts right after this one: re-arm the head lexer.
  s->head_done_ = false;
  s->lex_ = Lex::kStart;
  s->lex_seen_field_line_ = false;
  s->start_line_len_ = 0;
  s->prev_was_space_ = false;
  s->version_syntax_ok_ = true;
  s->pause_event_ = ParseEvent::kMessageDone;
  return HPE_PAUSED;
}

void Parser::map_llhttp_error(llhttp_errno_t err, const char* /*data*/, std::size_t /*len*/) {
  if (error_status_ != 0) return;  // set by one of our callbacks
  const char* reason = llhttp_get_error_reason(&parser_);
  std::string detail = reason != nullptr ? reason : llhttp_errno_name(err);
  if (mode_ == Mode::kResponse) {
    error_status_ = 502;
    error_detail_ = "invalid upstream response: " + detail;
    return;
  }
  int status = 400;
  if (err == HPE_INVALID_METHOD) {
    // A well-formed token we do not implement is 501; garbage is 400. The lexer kept the
    // start of the line (the method may have arrived in earlier feeds).
    std::size_t n = std::min(start_line_len_, sizeof(start_line_head_));
    std::size_t i = 0;
    while (i < n && is_tchar(start_line_head_[i])) ++i;
    bool token_then_space = i > 0 && (i < n ? start_line_head_[i] == ' ' : false);
    bool token_so_far = i > 0 && i == n;  // error hit inside a long token: still a token
    if (token_then_space || token_so_far) status = 501;
  } else if (err == HPE_INVALID_VERSION || err == HPE_PAUSED_H2_UPGRADE) {
    // A well-formed version we do not support is 505; a malformed one is 400.
    status = version_tail_ok() ? 505 : 400;
  }
  error_status_ = status;
  error_detail_ = detail;
}

ParseResult Parser::feed(char* data, std::size_t len) {
  body_.clear();
  if (error_status_ != 0) return {0, ParseEvent::kError};
  if (!head_done_ && lex_ != Lex::kDone && !lex_head(data, len)) return {0, ParseEvent::kError};
  if (paused_) {
    llhttp_resume(&parser_);
    paused_ = false;
  }
  llhttp_errno_t err = llhttp_execute(&parser_, data, len);
  field_.settle();  // a line left unfinished: its bytes may move before the next feed
  value_.settle();
  if (err == HPE_OK) return {len, ParseEvent::kNeedMore};
  const char* pos = llhttp_get_error_pos(&parser_);
  std::size_t consumed = pos != nullptr && pos >= data ? static_cast<std::size_t>(pos - data) : 0;
  if (err == HPE_PAUSED) {
    paused_ = true;
    return {consumed, pause_event_};
  }
  if (err == HPE_PAUSED_UPGRADE) {
    // The message before the upgrade is done; if the upstream refuses the upgrade the
    // connection carries on as HTTP.
    llhttp_resume_after_upgrade(&parser_);
    return {consumed, ParseEvent::kNeedMore};
  }
  map_llhttp_error(err, data, len);
  return {consumed, ParseEvent::kError};
}

ParseResult Parser::finish() {
  body_.clear();
  if (error_status_ != 0) return {0, ParseEvent::kError};
  if (paused_) {
    llhttp_resume(&parser_);
    paused_ = false;
  }
  llhttp_errno_t err = llhttp_finish(&parser_);
  if (err == HPE_OK) {
    if (!in_message_) return {0, ParseEvent::kNeedMore};
  } else if (err == HPE_PAUSED) {
    paused_ = true;
    return {0, pause_event_};
  }
  if (error_status_ == 0) {
    error_status_ = mode_ == Mode::kRequest ? 400 : 502;
    error_detail_ = "connection closed before the message was complete";
  }
  return {0, ParseEvent::kError};
}

}  // namespace sg::http
