// A cluster's OpenSSL client context (TLS to its endpoints), built at every (re)load from
// clusters[].tls: the minimum version, verification of the upstream's certificate against
// a CA file or the system's store (on by default), an optional client certificate, ALPN
// http/1.1. Each connection names the server it expects (io::TlsLayer::client): SNI and
// the verified name are the configured `sni`, else the endpoint's host; an IP literal is
// sent no SNI and is verified against the certificate's IP addresses.
#pragma once

#include <openssl/ssl.h>

#include <memory>
#include <string>

#include "config/schema.h"

namespace sg::tls {

class ClientContext {
 public:
  // Null with `error` set when OpenSSL refuses the configuration or a file.
  static std::shared_ptr<ClientContext> build(const config::ClusterTls& cfg, std::string& error);
  ~ClientContext();
  ClientContext(const ClientContext&) = delete;
  ClientContext& operator=(const ClientContext&) = delete;

  SSL_CTX* ctx() const { return ctx_; }
  bool verify() const { return cfg_.verify; }
  // The name to send and verify for an endpoint configured as `host`.
  const std::string& server_name(const std::string& host) const { return cfg_.sni.empty() ? host : cfg_.sni; }

 private:
  explicit ClientContext(const config::ClusterTls& cfg) : cfg_(cfg) {}
  config::ClusterTls cfg_;
  SSL_CTX* ctx_ = nullptr;
};

}  // namespace sg::tls
