// A TLS listener's OpenSSL contexts, built from its configuration at every (re)load: one
// SSL_CTX per certificate, all with the same settings, and an SNI callback that moves a
// handshake to the context whose certificate names the requested host (exact match, then
// wildcard; else the first certificate's). Connections keep the ServerContext they started
// on alive (a shared_ptr), so a reload that swaps certificates never pulls one from under
// a handshake; new connections take the new certificates.
//
// Session resumption: tickets are sealed with keys from a TicketKeys ring that the gateway
// keeps per listener across reloads (a reload does not cost every client a full handshake);
// the key in use rotates every ticket_key_rotation and the two before it are still
// accepted (a ticket sealed with an older key is accepted and replaced). A server-side
// session cache (per context, not kept across reloads) serves clients without tickets.
#pragma once

#include <openssl/ssl.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "config/schema.h"

namespace sg::tls {

class TicketKeys {
 public:
  static constexpr std::size_t kKept = 3;  // the key in use and the two before it
  struct Key {
    std::array<unsigned char, 16> name{};
    std::array<unsigned char, 32> aes{};
    std::array<unsigned char, 32> hmac{};
  };
  explicit TicketKeys(std::chrono::milliseconds rotation) : rotation_(rotation) {}
  void set_rotation(std::chrono::milliseconds r);
  // The key to seal a new ticket with (rotating first when it is due).
  Key current();
  // The key named `name`, if still kept; `is_current` says whether it is the one in use.
  bool find(const unsigned char* name, Key& out, bool& is_current);
  uint64_t rotations() const;

 private:
  void rotate_locked(std::chrono::steady_clock::time_point now);
  mutable std::mutex mu_;
  std::chrono::milliseconds rotation_;
  std::vector<Key> keys_;  // newest last
  std::chrono::steady_clock::time_point rotated_at_{};
  uint64_t rotations_ = 0;
};

class ServerContext {
 public:
  struct Certificate {
    std::string file;
    std::vector<std::string> names;
    std::string subject;
    int64_t not_after = 0;  // Unix time
    SSL_CTX* ctx = nullptr;
  };
  // Builds the contexts for `cfg`; null with `error` set when OpenSSL refuses something
  // (the loader has checked the files, but they may have changed since).
  static std::shared_ptr<ServerContext> build(const config::ListenerTls& cfg, std::shared_ptr<TicketKeys> keys,
                                              std::string& error);
  ~ServerContext();
  ServerContext(const ServerContext&) = delete;
  ServerContext& operator=(const ServerContext&) = delete;

  SSL_CTX* default_ctx() const { return certs_.front().ctx; }
  const std::vector<Certificate>& certificates() const { return certs_; }
  const config::ListenerTls& config() const { return cfg_; }
  // The context whose certificate serves `host` (lower case), or the default one.
  SSL_CTX* for_name(const std::string& host) const;

 private:
  ServerContext(const config::ListenerTls& cfg, std::shared_ptr<TicketKeys> keys)
      : cfg_(cfg), keys_(std::move(keys)) {}
  std::string add(const config::TlsCertificate& c);
  config::ListenerTls cfg_;
  std::shared_ptr<TicketKeys> keys_;
  std::vector<Certificate> certs_;
  std::vector<unsigned char> alpn_wire_;  // the ALPN protocols we speak, in wire format
};

}  // namespace sg::tls
