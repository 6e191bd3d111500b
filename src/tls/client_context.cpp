#include "tls/client_context.h"

#include <openssl/err.h>

#include "tls/certs.h"

namespace sg::tls {

namespace {
constexpr unsigned char kAlpn[] = "\x08http/1.1";
}  // namespace

std::shared_ptr<ClientContext> ClientContext::build(const config::ClusterTls& cfg, std::string& error) {
  std::shared_ptr<ClientContext> cc(new ClientContext(cfg));
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) {
    error = "OpenSSL could not make a context: " + openssl_reason();
    return nullptr;
  }
  cc->ctx_ = ctx;
  SSL_CTX_set_min_proto_version(ctx, cfg.min_version == config::TlsVersion::k13 ? TLS1_3_VERSION : TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_alpn_protos(ctx, kAlpn, sizeof kAlpn - 1);
  if (cfg.verify) {
    const int ok = cfg.ca.empty() ? SSL_CTX_set_default_verify_paths(ctx)
                                  : SSL_CTX_load_verify_locations(ctx, cfg.ca.c_str(), nullptr);
    if (ok != 1) {
      error = (cfg.ca.empty() ? std::string("the system's CA store") : cfg.ca) + ": " + openssl_reason();
      return nullptr;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  }
  if (!cfg.cert.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, cfg.cert.c_str()) != 1) {
      error = cfg.cert + ": " + openssl_reason();
      return nullptr;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, cfg.key.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
      error = cfg.key + ": " + openssl_reason();
      return nullptr;
    }
  }
  return cc;
}

ClientContext::~ClientContext() { SSL_CTX_free(ctx_); }

}  // namespace sg::tls
