#include "io/tls.h"

#include <openssl/err.h>
#include <openssl/x509.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "io/string_pool.h"

namespace sg::io {

namespace {

class TlsCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "tls"; }
  std::string message(int c) const override {
    switch (static_cast<TlsErrc>(c)) {
      case TlsErrc::kHandshake: return "TLS handshake failed";
      case TlsErrc::kProtocol: return "TLS protocol error";
      case TlsErrc::kClosed: return "connection closed during the TLS handshake";
    }
    return "TLS error";
  }
};

// Ciphertext is read into the caller's buffer when it is at least this big (it is free
// space until the plaintext is decrypted into it); smaller reads use the session's scratch.
constexpr std::size_t kMinCipherRead = 4096;
constexpr std::size_t kScratch = 16 * 1024;
// Plaintext pieces below this size are gathered into one record with their neighbours
// (a response head, chunk-size lines and CRLFs would otherwise each cost a record).
constexpr std::size_t kGatherBelow = 2048;
// Write buffers that grew past this are given back after the write (an idle connection
// should not keep the biggest response it ever sent).
constexpr std::size_t kKeepCapacity = 16 * 1024;
// Ciphertext buffers that grew past this are given back when empty (shed_buffers_locked).
constexpr std::size_t kKeepCipher = 1024;

std::string_view kind_of(unsigned long e) {
  if (ERR_GET_LIB(e) != ERR_LIB_SSL) return "other";
  const int r = ERR_GET_REASON(e);
  switch (r) {
    case SSL_R_HTTP_REQUEST:
    case SSL_R_HTTPS_PROXY_REQUEST:
      return "not_tls";
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_UNKNOWN_PROTOCOL:
    case SSL_R_VERSION_TOO_LOW:
      return "version";
    case SSL_R_NO_SHARED_CIPHER:
      return "cipher";
    case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
    case SSL_R_CERTIFICATE_VERIFY_FAILED:
      return "client_certificate";
    default:
      break;
  }
  // Reasons from SSL_AD_REASON_OFFSET on are alerts the peer sent us.
  if (r >= SSL_AD_REASON_OFFSET) return "peer_alert";
  return "other";
}

}  // namespace

const std::error_category& tls_category() {
  static const TlsCategory c;
  return c;
}

std::unique_ptr<TlsLayer> TlsLayer::server(SSL_CTX* ctx, std::shared_ptr<const void> owner) {
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr) return nullptr;
  SSL_set_accept_state(ssl);
  std::unique_ptr<TlsLayer> layer(new TlsLayer(ssl));
  layer->owner_ = std::move(owner);
  return layer;
}

std::unique_ptr<TlsLayer> TlsLayer::client(SSL_CTX* ctx, const std::string& server_name,
                                           std::shared_ptr<TlsSessionSlot> resume) {
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr) return nullptr;
  SSL_set_connect_state(ssl);
  if (resume) attach_slot(ssl, std::move(resume));
  in6_addr ip6;
  in_addr ip4;
  const bool is_ip = ::inet_pton(AF_INET, server_name.c_str(), &ip4) == 1 ||
                     ::inet_pton(AF_INET6, server_name.c_str(), &ip6) == 1;
  if (is_ip) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), server_name.c_str());
  } else if (!server_name.empty()) {
    SSL_set_tlsext_host_name(ssl, server_name.c_str());
    SSL_set1_host(ssl, server_name.c_str());
  }
  return std::unique_ptr<TlsLayer>(new TlsLayer(ssl));
}

// The session's transport: a BIO whose bytes live in its TlsLayer (cipher_in_, cipher_out_),
// called only from OpenSSL calls made under the layer's mu_. Not memory BIOs: one keeps
// the largest buffer it ever held, and a fresh one costs a lock and several allocations
// (replacing both at every idle wait cost 16% of keep-alive HTTPS CPU), while these
// strings are given back for the price of a free. An empty input is "not yet" (a retry,
// WANT_READ), never EOF: EOF is the socket's to say.
struct TransportBio {
  static TlsLayer& layer(BIO* b) { return *static_cast<TlsLayer*>(BIO_get_data(b)); }

  static int read(BIO* b, char* buf, std::size_t len, std::size_t* done) {
    TlsLayer& t = layer(b);
    BIO_clear_retry_flags(b);
    const std::size_t avail = t.cipher_in_.size() - t.cipher_in_pos_;
    if (avail == 0) {
      BIO_set_retry_read(b);
      *done = 0;
      return 0;
    }
    const std::size_t n = std::min(avail, len);
    std::memcpy(buf, t.cipher_in_.data() + t.cipher_in_pos_, n);
    t.cipher_in_pos_ += n;  // (feed() drops what was read)
    *done = n;
    return 1;
  }
  static int write(BIO* b, const char* data, std::size_t len, std::size_t* done) {
    BIO_clear_retry_flags(b);
    std::string& out = layer(b).cipher_out_;
    if (out.empty()) adopt_pooled_buffer(out);
    out.append(data, len);
    *done = len;
    return 1;
  }
  static long ctrl(BIO* b, int cmd, long /*num*/, void* /*ptr*/) {
    switch (cmd) {
      case BIO_CTRL_FLUSH: return 1;
      case BIO_CTRL_PENDING: return static_cast<long>(layer(b).cipher_in_.size() - layer(b).cipher_in_pos_);
      case BIO_CTRL_WPENDING: return static_cast<long>(layer(b).cipher_out_.size());
      default: return 0;  // no EOF, no kTLS, nothing else
    }
  }
  static int create(BIO* b) {
    BIO_set_init(b, 1);
    return 1;
  }

  static const BIO_METHOD* method() {
    static BIO_METHOD* const m = [] {
      BIO_METHOD* mm = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "stealgate transport");
      BIO_meth_set_read_ex(mm, &read);
      BIO_meth_set_write_ex(mm, &write);
      BIO_meth_set_ctrl(mm, &ctrl);
      BIO_meth_set_create(mm, &create);
      return mm;
    }();
    return m;
  }
};

TlsLayer::TlsLayer(SSL* ssl) : ssl_(ssl) {
  BIO* b = BIO_new(TransportBio::method());
  BIO_set_data(b, this);
  SSL_set_bio(ssl_, b, b);  // the SSL owns it from here (one reference, as rbio and wbio)
}

TlsLayer::~TlsLayer() { SSL_free(ssl_); }

void TlsLayer::take_output_locked() {
  if (cipher_out_.empty()) return;
  if (out_.empty()) {
    out_.swap(cipher_out_);
  } else {
    out_.append(cipher_out_);
    cipher_out_.clear();
  }
}

void TlsLayer::release_idle_buffers() {
  scratch_.reset();
  recycle_buffer(out_);
  recycle_buffer(stage_);
  std::lock_guard g(mu_);
  shed_buffers_locked(0);
}

std::size_t TlsLayer::idle_releasable_bytes() {
  auto heap = [](const std::string& s) { return s.capacity() > std::string().capacity() ? s.capacity() : 0; };
  std::lock_guard g(mu_);
  return (scratch_ ? kScratch : 0) + heap(out_) + heap(stage_) + heap(cipher_in_) + heap(cipher_out_);
}

void TlsLayer::shed_buffers_locked(std::size_t keep) {
  if (cipher_in_pos_ == cipher_in_.size() && cipher_in_.capacity() > keep) {
    recycle_buffer(cipher_in_);
    cipher_in_pos_ = 0;
  }
  if (cipher_out_.empty() && cipher_out_.capacity() > keep) recycle_buffer(cipher_out_);
}

void TlsLayer::feed(std::span<const char> bytes) {
  std::lock_guard g(mu_);
  // What OpenSSL has read goes first (the unread rest is at most a partial record), so
  // that a long upload does not grow the buffer.
  cipher_in_.erase(0, std::exchange(cipher_in_pos_, 0));
  if (cipher_in_.empty()) adopt_pooled_buffer(cipher_in_);
  cipher_in_.append(bytes.data(), bytes.size());
}

std::span<char> TlsLayer::scratch(std::span<char> buf) {
  if (buf.size() >= kMinCipherRead) return buf;
  if (!scratch_) scratch_.reset(new char[kScratch]);
  return {scratch_.get(), kScratch};
}

void TlsLayer::note_failure(std::string_view kind) {
  failure_kind_ = kind;
  if (reason_.empty()) reason_ = std::string(kind);
}

// Records why the last OpenSSL call failed (the first error queued) and clears the queue.
static void record(std::string& reason, std::string_view& kind, int ssl_error) {
  const unsigned long e = ERR_get_error();
  if (e != 0) {
    const char* r = ERR_reason_error_string(e);
    reason = r != nullptr ? r : "unknown error";
    kind = kind_of(e);
  } else if (ssl_error == SSL_ERROR_SYSCALL) {
    reason = "unexpected end of the connection";
    kind = "closed";
  } else {
    reason = "OpenSSL error " + std::to_string(ssl_error);
    kind = "other";
  }
  ERR_clear_error();
}

exec::Task<std::error_code> TlsLayer::handshake(TcpStream& sock, Deadline dl) {
  for (;;) {
    int rc = 0;
    int err = SSL_ERROR_NONE;
    {
      std::lock_guard g(mu_);
      ERR_clear_error();
      rc = SSL_do_handshake(ssl_);
      if (rc != 1) {
        err = SSL_get_error(ssl_, rc);
        if (err != SSL_ERROR_WANT_READ) {
          record(reason_, failure_kind_, err);
          // "certificate verify failed" says too little: say what was wrong with it.
          const long v = SSL_get_verify_result(ssl_);
          if (v != X509_V_OK) reason_ += std::string(" (") + X509_verify_cert_error_string(v) + ")";
        }
      }
      take_output_locked();
    }
    if (!out_.empty()) {
      // Our flight, or the alert that ends a failed handshake.
      std::error_code ec = co_await sock.write_all(out_, dl);
      out_.clear();
      if (ec && (rc == 1 || err == SSL_ERROR_WANT_READ)) {
        note_failure(ec == std::errc::timed_out ? "timeout" : "closed");
        co_return ec == std::errc::timed_out ? ec : make_error_code(TlsErrc::kClosed);
      }
    }
    if (rc == 1) break;
    if (err != SSL_ERROR_WANT_READ) co_return make_error_code(TlsErrc::kHandshake);
    std::span<char> buf = scratch({});
    IoResult r = co_await sock.read_some(buf, dl);
    if (r.ec == std::errc::timed_out) {
      note_failure("timeout");
      co_return r.ec;
    }
    if (r.ec || r.n == 0) {
      note_failure("closed");
      co_return make_error_code(TlsErrc::kClosed);
    }
    feed(buf.first(r.n));
  }
  // What only the handshake needed goes: the scratch (reads now use the caller's buffers),
  // the flight's output buffer, the BIOs' handshake-sized buffers.
  scratch_.reset();
  std::string().swap(out_);
  {
    std::lock_guard g(mu_);
    shed_buffers_locked(kKeepCipher);
  }
  if (SSL_is_server(ssl_) == 1) summary_ = agreed();
  co_return std::error_code{};
}

// One SSL_read: the plaintext, EOF (close_notify), an error, or nullopt for "needs more
// ciphertext".
static std::optional<IoResult> read_plain(SSL* ssl, std::span<char> buf, std::string& reason,
                                          std::string_view& kind) {
  ERR_clear_error();
  std::size_t n = 0;
  const int rc = SSL_read_ex(ssl, buf.data(), buf.size(), &n);
  if (rc == 1) return IoResult{{}, n};
  const int err = SSL_get_error(ssl, rc);
  if (err == SSL_ERROR_WANT_READ) return std::nullopt;
  if (err == SSL_ERROR_ZERO_RETURN) return IoResult{{}, 0};
  record(reason, kind, err);
  return IoResult{make_error_code(TlsErrc::kProtocol), 0};
}

exec::Task<IoResult> TlsLayer::read_some(TcpStream& sock, std::span<char> buf, Deadline dl, ReadMode mode) {
  for (;;) {
    std::optional<IoResult> got;
    {
      std::lock_guard g(mu_);
      got = read_plain(ssl_, buf, reason_, failure_kind_);
      if (!got) shed_buffers_locked(kKeepCipher);  // all ciphertext taken: likely to idle now
    }
    if (got) co_return *got;
    std::span<char> cipher = scratch(buf);
    IoResult r = co_await sock.read_some(cipher, dl, mode);
    if (r.ec || r.n == 0) co_return r;
    feed(cipher.first(r.n));
  }
}

std::optional<IoResult> TlsLayer::try_read(TcpStream& sock, std::span<char> buf) {
  for (;;) {
    {
      std::lock_guard g(mu_);
      if (auto got = read_plain(ssl_, buf, reason_, failure_kind_)) return got;
    }
    std::span<char> cipher = scratch(buf);
    std::optional<IoResult> r = sock.try_read(cipher);
    if (!r || r->ec || r->n == 0) return r;
    feed(cipher.first(r->n));
  }
}

exec::Task<std::error_code> TlsLayer::write_all(TcpStream& sock, std::span<const std::string_view> bufs, Deadline dl) {
  bool failed = false;
  {
    std::lock_guard g(mu_);
    ERR_clear_error();
    auto encrypt = [&](std::string_view p) {
      std::size_t n = 0;
      if (!p.empty() && SSL_write_ex(ssl_, p.data(), p.size(), &n) != 1) failed = true;
    };
    adopt_pooled_buffer(stage_);  // (empty here: every write leaves it so)
    for (std::string_view b : bufs) {
      if (b.size() < kGatherBelow) {
        stage_.append(b);
        continue;
      }
      encrypt(stage_);
      stage_.clear();
      encrypt(b);
    }
    encrypt(stage_);
    stage_.clear();
    if (failed) record(reason_, failure_kind_, SSL_ERROR_SSL);
    take_output_locked();
  }
  if (stage_.capacity() > kKeepCapacity) std::string().swap(stage_);
  if (failed) {
    out_.clear();
    co_return make_error_code(TlsErrc::kProtocol);
  }
  std::error_code ec = co_await sock.write_all(out_, dl);
  out_.clear();
  if (out_.capacity() > kKeepCapacity) std::string().swap(out_);
  co_return ec;
}

bool TlsLayer::has_buffered() {
  std::lock_guard g(mu_);
  // Decrypted bytes, or ciphertext OpenSSL has not looked at yet. Not SSL_has_pending():
  // it also counts the start of a record whose rest has not arrived, and a wait that
  // returned at once for that would spin (read, "need more", wait, ...) until the peer
  // sends the rest, which a hostile client can put off indefinitely. Without read-ahead
  // OpenSSL takes one record at a time from cipher_in_, so any whole record is still there.
  return SSL_pending(ssl_) > 0 || cipher_in_pos_ < cipher_in_.size();
}

TcpStream::PeerState TlsLayer::peek(TcpStream& sock) {
  {
    std::lock_guard g(mu_);
    if (SSL_pending(ssl_) > 0) return TcpStream::PeerState::kData;
  }
  // Pull what the socket holds (without waiting), then let OpenSSL look at it: a
  // close_notify is data to TCP but a close to us.
  std::span<char> cipher = scratch({});
  std::optional<IoResult> r = sock.try_read(cipher);
  if (r && (r->ec || r->n == 0)) return TcpStream::PeerState::kClosed;
  if (r) feed(cipher.first(r->n));
  std::lock_guard g(mu_);
  ERR_clear_error();
  char c;
  std::size_t n = 0;
  const int rc = SSL_peek_ex(ssl_, &c, 1, &n);
  if (rc == 1) return TcpStream::PeerState::kData;
  const int err = SSL_get_error(ssl_, rc);
  ERR_clear_error();
  return err == SSL_ERROR_WANT_READ ? TcpStream::PeerState::kSilent : TcpStream::PeerState::kClosed;
}

std::string TlsLayer::close_notify() {
  std::lock_guard g(mu_);
  ERR_clear_error();
  if (SSL_is_init_finished(ssl_) == 1) (void)SSL_shutdown(ssl_);
  ERR_clear_error();
  take_output_locked();
  std::string alert = std::move(out_);
  out_.clear();
  return alert;
}

TlsSummary TlsLayer::agreed() const {
  TlsSummary s;
  s.version = SSL_get_version(ssl_);
  if (const char* c = SSL_get_cipher_name(ssl_)) s.cipher = c;
  const unsigned char* alpn = nullptr;
  unsigned int alpn_len = 0;
  SSL_get0_alpn_selected(ssl_, &alpn, &alpn_len);
  if (alpn != nullptr) s.alpn = std::string_view(reinterpret_cast<const char*>(alpn), alpn_len);
  if (const char* sn = SSL_get_servername(ssl_, TLSEXT_NAMETYPE_host_name)) s.sni = sn;
  s.resumed = SSL_session_reused(ssl_) == 1;
  X509* peer = SSL_get0_peer_certificate(ssl_);
  if (peer != nullptr && SSL_get_verify_result(ssl_) == X509_V_OK) {
    BIO* b = BIO_new(BIO_s_mem());
    X509_NAME_print_ex(b, X509_get_subject_name(peer), 0, XN_FLAG_RFC2253);
    char* p = nullptr;
    const long n = BIO_get_mem_data(b, &p);
    if (n > 0) s.peer_subject.assign(p, static_cast<std::size_t>(n));
    BIO_free(b);
  }
  return s;
}

}  // namespace sg::io
