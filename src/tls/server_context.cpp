#include "tls/server_context.h"

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cstring>

#include "tls/certs.h"

namespace sg::tls {

namespace {

constexpr unsigned char kSessionContext[] = "stealgate";

// Fetched once: EVP_aes_256_cbc() in an EVP_*Init call is an implicit fetch (a locked name
// lookup) on every ticket.
const EVP_CIPHER* ticket_cipher() {
  static EVP_CIPHER* const c = EVP_CIPHER_fetch(nullptr, "AES-256-CBC", nullptr);
  return c;
}

int ticket_key_cb(SSL* s, unsigned char key_name[16], unsigned char* iv, EVP_CIPHER_CTX* cctx, EVP_MAC_CTX* hctx,
                  int enc) {
  auto* keys = static_cast<TicketKeys*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(s)));
  TicketKeys::Key k;
  int result = 1;
  if (enc == 1) {
    k = keys->current();
    std::memcpy(key_name, k.name.data(), k.name.size());
    if (RAND_bytes(iv, EVP_MAX_IV_LENGTH) != 1) return -1;
    if (EVP_EncryptInit_ex2(cctx, ticket_cipher(), k.aes.data(), iv, nullptr) != 1) return -1;
  } else {
    bool current = false;
    if (!keys->find(key_name, k, current)) return 0;  // unknown or retired: a full handshake
    if (EVP_DecryptInit_ex2(cctx, ticket_cipher(), k.aes.data(), iv, nullptr) != 1) return -1;
    // 2: accepted, and the client gets a new ticket. Under TLS 1.3 always: a client should
    // not use a ticket twice (RFC 8446 C.4), and the ticket sent right after the client's
    // Finished carries its ACK. Without one, a client with Nagle on (Python's default)
    // held its request until our delayed ACK, 40 ms later. Under TLS 1.2 only when the key
    // has been rotated: there the ticket may be reused, and a new one would travel in our
    // flight, before the client's Finished, so it would carry no such ACK.
    result = current && SSL_version(s) != TLS1_3_VERSION ? 1 : 2;
  }
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, k.hmac.data(), k.hmac.size()),
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_end(),
  };
  if (EVP_MAC_CTX_set_params(hctx, params) != 1) return -1;
  return result;
}

int servername_cb(SSL* ssl, int* /*alert*/, void* arg) {
  const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  if (name == nullptr) return SSL_TLSEXT_ERR_OK;  // no SNI: the default certificate
  std::string host(name);
  for (char& c : host) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
  SSL_CTX* ctx = static_cast<const ServerContext*>(arg)->for_name(host);
  if (ctx != SSL_get_SSL_CTX(ssl)) SSL_set_SSL_CTX(ssl, ctx);
  return SSL_TLSEXT_ERR_OK;
}

int alpn_cb(SSL* /*ssl*/, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
            unsigned int inlen, void* arg) {
  const auto* wire = static_cast<const std::vector<unsigned char>*>(arg);
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, wire->data(), static_cast<unsigned int>(wire->size()), in, inlen) !=
      OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;  // nothing in common: go on without ALPN (HTTP/1.1)
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

void TicketKeys::set_rotation(std::chrono::milliseconds r) {
  std::lock_guard g(mu_);
  rotation_ = r;
}

void TicketKeys::rotate_locked(std::chrono::steady_clock::time_point now) {
  Key k;
  RAND_bytes(k.name.data(), static_cast<int>(k.name.size()));
  RAND_bytes(k.aes.data(), static_cast<int>(k.aes.size()));
  RAND_bytes(k.hmac.data(), static_cast<int>(k.hmac.size()));
  keys_.push_back(k);
  if (keys_.size() > kKept) keys_.erase(keys_.begin());
  rotated_at_ = now;
  ++rotations_;
}

TicketKeys::Key TicketKeys::current() {
  std::lock_guard g(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (keys_.empty() || now - rotated_at_ >= rotation_) rotate_locked(now);
  return keys_.back();
}

bool TicketKeys::find(const unsigned char* name, Key& out, bool& is_current) {
  std::lock_guard g(mu_);
  for (std::size_t i = 0; i < keys_.size(); ++i) {
    if (std::memcmp(keys_[i].name.data(), name, keys_[i].name.size()) == 0) {
      out = keys_[i];
      is_current = i + 1 == keys_.size() && std::chrono::steady_clock::now() - rotated_at_ < rotation_;
      return true;
    }
  }
  return false;
}

uint64_t TicketKeys::rotations() const {
  std::lock_guard g(mu_);
  return rotations_;
}

std::shared_ptr<ServerContext> ServerContext::build(const config::ListenerTls& cfg, std::shared_ptr<TicketKeys> keys,
                                                    std::string& error) {
  std::shared_ptr<ServerContext> sc(new ServerContext(cfg, std::move(keys)));
  for (const std::string& p : cfg.alpn) {
    sc->alpn_wire_.push_back(static_cast<unsigned char>(p.size()));
    sc->alpn_wire_.insert(sc->alpn_wire_.end(), p.begin(), p.end());
  }
  for (const config::TlsCertificate& c : cfg.certificates) {
    error = sc->add(c);
    if (!error.empty()) return nullptr;
  }
  if (sc->certs_.empty()) {
    error = "no certificate";
    return nullptr;
  }
  return sc;
}

std::string ServerContext::add(const config::TlsCertificate& c) {
  CertificateInfo info;
  if (std::string why = check_certificate(c.cert, c.key, &info); !why.empty()) return why;
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return "OpenSSL could not make a context: " + openssl_reason();
  certs_.push_back(Certificate{c.cert, info.names, info.subject, info.not_after, ctx});
  ERR_clear_error();
  if (SSL_CTX_use_certificate_chain_file(ctx, c.cert.c_str()) != 1) return c.cert + ": " + openssl_reason();
  if (SSL_CTX_use_PrivateKey_file(ctx, c.key.c_str(), SSL_FILETYPE_PEM) != 1) return c.key + ": " + openssl_reason();
  if (SSL_CTX_check_private_key(ctx) != 1) return c.key + ": " + openssl_reason();

  SSL_CTX_set_min_proto_version(ctx, cfg_.min_version == config::TlsVersion::k13 ? TLS1_3_VERSION : TLS1_2_VERSION);
  uint64_t opts = SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE;
  if (!cfg_.session_tickets) opts |= SSL_OP_NO_TICKET;
  SSL_CTX_set_options(ctx, opts);
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);  // idle connections give OpenSSL's buffers back
  if (!cfg_.ciphers.empty() && SSL_CTX_set_cipher_list(ctx, cfg_.ciphers.c_str()) != 1) {
    return "ciphers: " + openssl_reason();
  }
  if (!cfg_.ciphersuites.empty() && SSL_CTX_set_ciphersuites(ctx, cfg_.ciphersuites.c_str()) != 1) {
    return "ciphersuites: " + openssl_reason();
  }

  SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof kSessionContext - 1);
  SSL_CTX_set_timeout(ctx, static_cast<long>(std::max<int64_t>(1, cfg_.session_timeout.count() / 1000)));
  if (cfg_.session_cache_size > 0) {
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
    SSL_CTX_sess_set_cache_size(ctx, static_cast<long>(cfg_.session_cache_size));
  } else {
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  }
  // After a resumption OpenSSL always sends one ticket; this is the count after a full
  // handshake. Each costs the server ~3% of a full handshake's instructions.
  SSL_CTX_set_num_tickets(ctx, cfg_.tickets_per_handshake);
  SSL_CTX_set_app_data(ctx, keys_.get());
  SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, ticket_key_cb);

  SSL_CTX_set_tlsext_servername_callback(ctx, servername_cb);
  SSL_CTX_set_tlsext_servername_arg(ctx, this);
  if (!alpn_wire_.empty()) SSL_CTX_set_alpn_select_cb(ctx, alpn_cb, &alpn_wire_);

  if (cfg_.client_auth != config::ClientAuth::kOff) {
    if (SSL_CTX_load_verify_locations(ctx, cfg_.client_ca.c_str(), nullptr) != 1) {
      return cfg_.client_ca + ": " + openssl_reason();
    }
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(cfg_.client_ca.c_str());
    if (names != nullptr) SSL_CTX_set_client_CA_list(ctx, names);  // the context owns it
    int mode = SSL_VERIFY_PEER;
    if (cfg_.client_auth == config::ClientAuth::kRequired) mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    SSL_CTX_set_verify(ctx, mode, nullptr);
  }
  return {};
}

ServerContext::~ServerContext() {
  for (Certificate& c : certs_) SSL_CTX_free(c.ctx);
}

SSL_CTX* ServerContext::for_name(const std::string& host) const {
  for (const Certificate& c : certs_) {
    for (const std::string& n : c.names) {
      if (n == host) return c.ctx;
    }
  }
  for (const Certificate& c : certs_) {
    for (const std::string& n : c.names) {
      if (name_matches(n, host)) return c.ctx;
    }
  }
  return default_ctx();
}

}  // namespace sg::tls
