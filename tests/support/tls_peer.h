// TLS for unit tests without files: a self-signed certificate made in memory, a server
// context with it, and a blocking OpenSSL client on the other end of a socket pair (driven
// from a plain thread, as a real client would be).
#pragma once

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace sg::testing {

class TestTls {
 public:
  TestTls() {
    EVP_PKEY* key = EVP_EC_gen("P-256");
    X509* x = X509_new();
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), 0);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_set_pubkey(x, key);
    X509_NAME* n = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("test.local"), -1, -1, 0);
    X509_set_issuer_name(x, n);
    X509_sign(x, key, EVP_sha256());
    server_ = SSL_CTX_new(TLS_server_method());
    SSL_CTX_use_certificate(server_, x);
    SSL_CTX_use_PrivateKey(server_, key);
    SSL_CTX_set_options(server_, SSL_OP_NO_RENEGOTIATION);
    client_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(client_, SSL_VERIFY_NONE, nullptr);
    X509_free(x);
    EVP_PKEY_free(key);
  }
  ~TestTls() {
    SSL_CTX_free(server_);
    SSL_CTX_free(client_);
  }
  TestTls(const TestTls&) = delete;
  TestTls& operator=(const TestTls&) = delete;
  SSL_CTX* server() const { return server_; }
  SSL_CTX* client() const { return client_; }

 private:
  SSL_CTX* server_ = nullptr;
  SSL_CTX* client_ = nullptr;
};

// A blocking TLS client on `fd` (owned).
class TlsClient {
 public:
  TlsClient(SSL_CTX* ctx, int fd) : fd_(fd), ssl_(SSL_new(ctx)) { SSL_set_fd(ssl_, fd); }
  ~TlsClient() {
    SSL_free(ssl_);
    ::close(fd_);
  }
  TlsClient(const TlsClient&) = delete;
  TlsClient& operator=(const TlsClient&) = delete;
  bool handshake() { return SSL_connect(ssl_) == 1; }
  bool write(const std::string& s) {
    std::size_t n = 0;
    return s.empty() || SSL_write_ex(ssl_, s.data(), s.size(), &n) == 1;
  }
  // Reads exactly n bytes (less on EOF or error).
  std::string read(std::size_t n) {
    std::string out;
    char buf[16384];
    while (out.size() < n) {
      std::size_t got = 0;
      if (SSL_read_ex(ssl_, buf, std::min(sizeof buf, n - out.size()), &got) != 1) break;
      out.append(buf, got);
    }
    return out;
  }
  void close_notify() { SSL_shutdown(ssl_); }
  int fd() const { return fd_; }

 private:
  int fd_;
  SSL* ssl_;
};

}  // namespace sg::testing
