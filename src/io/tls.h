// TLS over a TcpStream (OpenSSL 3), on either I/O driver.
//
// OpenSSL never touches the socket: the session reads ciphertext from a memory BIO that we
// fill with the stream's own reads (on io_uring, its receives) and writes ciphertext into a
// memory BIO that we empty with the stream's writes. So TLS costs no extra syscall and
// inherits the drivers' deadlines, cancellation and budget.
//
// Concurrency: a session is used by one task at a time, except in an upgrade tunnel, where
// one task reads and another writes the same stream. Every OpenSSL call and BIO access is
// made under mu_, and no lock is held across an await. Only the writer empties the output
// BIO (in write_all and close_notify), so output never interleaves; what a reader makes
// OpenSSL emit (a KeyUpdate answer) leaves with the next write, which is where RFC 8446
// §4.6.3 wants it ("prior to sending its next Application Data record"). Renegotiation is
// refused (SSL_OP_NO_RENEGOTIATION), so reads never need to write to make progress.
#pragma once

#include <openssl/buffer.h>
#include <openssl/ssl.h>

#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

#include "exec/coro.h"
#include "io/tcp.h"

namespace sg::io {

enum class TlsErrc {
  kHandshake = 1,   // the handshake failed (reason() says why)
  kProtocol,        // a record could not be read or written after the handshake
  kClosed,          // the peer closed or reset during the handshake
};
const std::error_category& tls_category();
inline std::error_code make_error_code(TlsErrc e) { return {static_cast<int>(e), tls_category()}; }

// What a finished handshake agreed on (for logs, metrics and forwarded headers).
struct TlsSummary {
  std::string_view version;  // "TLSv1.3"
  std::string_view cipher;
  std::string_view alpn;     // "" when none was negotiated
  std::string sni;           // the server name the client asked for ("" when none)
  bool resumed = false;
  // The client certificate, when one was presented and verified: its subject as an RFC
  // 2253 string ("CN=alice,O=Example").
  std::string peer_subject;
};

// The latest session one server issued to our client connections, for the next connection
// to resume (no certificate exchange or verification, no signature: an abbreviated
// handshake). Shared by the connections to that server; thread-safe.
class TlsSessionSlot {
 public:
  TlsSessionSlot() = default;
  ~TlsSessionSlot();
  TlsSessionSlot(const TlsSessionSlot&) = delete;
  TlsSessionSlot& operator=(const TlsSessionSlot&) = delete;
  // A reference to the kept session (the caller frees it), or nullptr.
  SSL_SESSION* get() const;
  // Keeps `s` (takes the caller's reference) in place of the one kept before.
  void keep(SSL_SESSION* s);
  void forget() { keep(nullptr); }

 private:
  mutable std::mutex mu_;
  SSL_SESSION* session_ = nullptr;
};

class TlsLayer {
 public:
  // A server-side session on `ctx` (SNI may switch it to another context during the
  // handshake; see tls/context.h). `owner` keeps `ctx` and the contexts SNI may switch to
  // alive for the layer's life (a reload may publish new ones meanwhile).
  static std::unique_ptr<TlsLayer> server(SSL_CTX* ctx, std::shared_ptr<const void> owner);
  // A client-side session that expects `server_name`: sent as SNI (unless it is an IP
  // literal) and, when the context verifies, checked against the certificate's names (or
  // IP addresses). With `resume`, it offers the session kept there (from an earlier
  // connection to the same server), and keeps there the sessions this server issues; the
  // context must have gone through enable_client_resumption().
  static std::unique_ptr<TlsLayer> client(SSL_CTX* ctx, const std::string& server_name,
                                          std::shared_ptr<TlsSessionSlot> resume = nullptr);
  // Makes `ctx`'s client sessions hand the sessions their servers issue (TLS 1.2 session
  // ids, TLS 1.3 tickets) to their TlsSessionSlot, not to OpenSSL's internal cache.
  static void enable_client_resumption(SSL_CTX* ctx);
  ~TlsLayer();
  TlsLayer(const TlsLayer&) = delete;
  TlsLayer& operator=(const TlsLayer&) = delete;

  // Runs the handshake to its end; on failure any alert OpenSSL produced is sent first and
  // reason() names the cause. errc::timed_out at the deadline.
  exec::Task<std::error_code> handshake(TcpStream& sock, Deadline dl);
  // Plaintext, like TcpStream::read_some: n == 0 with no error is the peer's close_notify
  // or a TCP EOF.
  exec::Task<IoResult> read_some(TcpStream& sock, std::span<char> buf, Deadline dl, ReadMode mode);
  // Without waiting: nullopt when no whole record is there yet.
  std::optional<IoResult> try_read(TcpStream& sock, std::span<char> buf);
  exec::Task<std::error_code> write_all(TcpStream& sock, std::span<const std::string_view> bufs, Deadline dl);
  // Decrypted bytes, or ciphertext not yet looked at, are held here: a read may succeed
  // without the socket becoming readable.
  bool has_buffered();
  // Whether a read would find data, a close (close_notify, EOF, reset, a bad record) or
  // nothing yet; consumes no plaintext (what it pulls from the socket stays buffered).
  TcpStream::PeerState peek(TcpStream& sock);
  // The close_notify alert to send last (empty when the handshake never finished).
  std::string close_notify();

  // The connection goes idle: gives back the buffers only a request in progress needs
  // (the scratch, the write buffers, the ciphertext buffers when empty), as the plain path
  // holds none while idle.
  void release_idle_buffers();
  // What those buffers hold now, in bytes of capacity (the task that owns the stream).
  std::size_t idle_releasable_bytes();

  // What the handshake agreed on: set when a server-side handshake succeeds (the client
  // connection's TLS fields in logs and headers, for every request on it); empty before,
  // and on the client side.
  const TlsSummary& summary() const { return summary_; }
  // Whether the handshake resumed an earlier session.
  bool resumed() const { return SSL_session_reused(ssl_) == 1; }
  // The cause of the last failure: OpenSSL's reason ("no shared cipher"), or ours.
  const std::string& reason() const { return reason_; }
  // A short, bounded word for the cause of a failed handshake (a metrics label):
  // timeout, closed, not_tls, version, cipher, client_certificate, peer_alert, other.
  std::string_view failure_kind() const { return failure_kind_; }

 private:
  explicit TlsLayer(SSL* ssl);
  // Offers `slot`'s session on `ssl` and has `ssl` keep its new sessions there.
  static void attach_slot(SSL* ssl, std::shared_ptr<TlsSessionSlot> slot);
  friend struct TransportBio;  // tls.cpp: OpenSSL's side of cipher_in_ and cipher_out_
  // Moves what OpenSSL wrote into out_ (mu_ held).
  void take_output_locked();
  // Gives back the ciphertext buffers when they are empty and bigger than `keep` (mu_ held).
  void shed_buffers_locked(std::size_t keep);
  // Feeds ciphertext to OpenSSL.
  void feed(std::span<const char> bytes);
  // Scratch for ciphertext when the caller's buffer is small.
  std::span<char> scratch(std::span<char> buf);
  void note_failure(std::string_view kind);
  TlsSummary agreed() const;

  std::mutex mu_;
  SSL* ssl_ = nullptr;
  // The session's transport (a BIO of ours, TransportBio): ciphertext from the network not
  // yet read by OpenSSL (from cipher_in_pos_ on), and ciphertext OpenSSL wrote, not yet
  // taken for the network. Under mu_.
  std::string cipher_in_;
  std::size_t cipher_in_pos_ = 0;
  std::string cipher_out_;
  std::string out_;     // ciphertext taken from cipher_out_, being written (the writer's)
  std::string stage_;   // small plaintext pieces gathered into one record
  std::unique_ptr<char[]> scratch_;
  std::string reason_;
  std::string_view failure_kind_ = "other";
  TlsSummary summary_;
  std::shared_ptr<const void> owner_;  // server side: what the SSL object's contexts belong to
};

}  // namespace sg::io

template <>
struct std::is_error_code_enum<sg::io::TlsErrc> : std::true_type {};
