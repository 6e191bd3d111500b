// Client-side TLS session resumption (io/tls.h: TlsSessionSlot, enable_client_resumption).
//
// OpenSSL hands a client the sessions its server issues through the context's new-session
// callback: at the end of a TLS 1.2 handshake, and for TLS 1.3 whenever a NewSessionTicket
// arrives (after the handshake, read with the first response). The callback finds the
// connection's slot in the SSL's ex_data, where a heap copy of the slot's shared_ptr keeps
// the slot alive as long as the SSL (OpenSSL frees it with the SSL): a connection that
// outlives its cluster's context (a reload) still has somewhere to put its ticket.
#include <openssl/ssl.h>

#include <memory>
#include <mutex>

#include "io/tls.h"

namespace sg::io {

namespace {

void free_slot(void* /*parent*/, void* ptr, CRYPTO_EX_DATA* /*ad*/, int /*idx*/, long /*argl*/, void* /*argp*/) {
  delete static_cast<std::shared_ptr<TlsSessionSlot>*>(ptr);
}

int slot_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, free_slot);
  return index;
}

// OpenSSL's new-session callback: 1 = we took the reference to `session`.
int on_new_session(SSL* ssl, SSL_SESSION* session) {
  auto* slot = static_cast<std::shared_ptr<TlsSessionSlot>*>(SSL_get_ex_data(ssl, slot_index()));
  if (slot == nullptr || SSL_SESSION_is_resumable(session) != 1) return 0;
  (*slot)->keep(session);
  return 1;
}

}  // namespace

TlsSessionSlot::~TlsSessionSlot() { SSL_SESSION_free(session_); }

SSL_SESSION* TlsSessionSlot::get() const {
  std::lock_guard lk(mu_);
  if (session_ != nullptr) SSL_SESSION_up_ref(session_);
  return session_;
}

void TlsSessionSlot::keep(SSL_SESSION* s) {
  SSL_SESSION* old;
  {
    std::lock_guard lk(mu_);
    old = session_;
    session_ = s;
  }
  SSL_SESSION_free(old);  // (nullptr is fine)
}

void TlsLayer::enable_client_resumption(SSL_CTX* ctx) {
  // Client mode without the internal store: sessions go only to the callback, which keeps
  // the newest per server. One ticket is enough; TLS 1.3 servers usually send two.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ctx, on_new_session);
}

void TlsLayer::attach_slot(SSL* ssl, std::shared_ptr<TlsSessionSlot> slot) {
  if (SSL_SESSION* s = slot->get()) {
    // A session whose time is up, or for another version, makes OpenSSL do a full
    // handshake instead: never a failure.
    SSL_set_session(ssl, s);
    SSL_SESSION_free(s);
  }
  auto* held = new std::shared_ptr<TlsSessionSlot>(std::move(slot));
  if (SSL_set_ex_data(ssl, slot_index(), held) != 1) delete held;
}

}  // namespace sg::io
