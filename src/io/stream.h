// The byte stream that http/ and proxy/ read and write: a TCP connection, plain or with
// TLS on it (io/tls.h). One concrete type rather than a virtual interface: the plain path,
// which most traffic takes, costs one predictable branch per call and no extra coroutine
// frame (each call hands back the TcpStream's or the TLS layer's own task).
//
// Semantics are TcpStream's (deadlines, EOF as n == 0, cancellation when the awaiting task
// is dropped); with TLS the bytes are plaintext, "readable" includes plaintext that TLS
// already holds, and peek()/peer_closed() see a close_notify as a close.
#pragma once

#include <memory>

#include "io/tcp.h"
#include "io/tls.h"

namespace sg::io {

class Stream {
 public:
  Stream() = default;
  explicit Stream(TcpStream tcp) : tcp_(std::move(tcp)) {}
  Stream(Stream&&) noexcept = default;
  Stream& operator=(Stream&&) noexcept = default;

  // Runs a server-side TLS handshake on `ctx` (`owner` keeps it alive: TlsLayer::server);
  // from then on the stream carries plaintext. On failure the stream is only good for
  // closing; tls()->reason() and failure_kind() say why.
  exec::Task<std::error_code> accept_tls(SSL_CTX* ctx, std::shared_ptr<const void> owner, Deadline dl);
  // Runs a client-side TLS handshake expecting `server_name` (TlsLayer::client), offering
  // to resume the session kept in `resume`, if any.
  exec::Task<std::error_code> connect_tls(SSL_CTX* ctx, std::string server_name, Deadline dl,
                                          std::shared_ptr<TlsSessionSlot> resume = nullptr);
  bool is_tls() const { return tls_ != nullptr; }
  TlsLayer* tls() { return tls_.get(); }

  bool is_open() const { return tcp_.is_open(); }
  TcpStream& tcp() { return tcp_; }

  exec::Task<IoResult> read_some(std::span<char> buf, Deadline dl = {}, ReadMode mode = ReadMode::kDefault) {
    if (tls_) return tls_->read_some(tcp_, buf, dl, mode);
    return tcp_.read_some(buf, dl, mode);
  }
  std::optional<IoResult> try_read(std::span<char> buf) {
    if (tls_) return tls_->try_read(tcp_, buf);
    return tcp_.try_read(buf);
  }
  exec::Task<std::error_code> write_all(std::span<const std::string_view> bufs, Deadline dl = {}) {
    if (tls_) return tls_->write_all(tcp_, bufs, dl);
    return tcp_.write_all(bufs, dl);
  }
  exec::Task<std::error_code> write_all(std::string_view data, Deadline dl = {});

  // Waits until this stream (0) or `other` (1) is readable; with TLS plaintext or
  // ciphertext already held here, at once.
  EitherAwaiter wait_readable(Stream* other, Deadline dl = {}) {
    return EitherAwaiter{tcp_.socket(), other != nullptr ? &other->tcp_.socket() : nullptr, dl,
                         tls_ != nullptr && tls_->has_buffered()};
  }

  // Gives back what TLS keeps only for a request in progress (TlsLayer::release_idle_buffers).
  void release_idle_buffers() {
    if (tls_) tls_->release_idle_buffers();
  }

  // Arms `wait` to complete `w` once this stream is readable (at once when TLS holds
  // plaintext or ciphertext already) or at `dl`: an idle connection's wait between bursts.
  void wait_readable(ReadableWait& wait, const Deadline& dl, exec::Waker w) {
    if (tls_ != nullptr && tls_->has_buffered()) {
      std::move(w).wake({std::error_code{}, kTagReady});
      return;
    }
    wait.start(tcp_.socket(), dl, std::move(w));
  }

  // After a readable wait on this stream completed (the idle wait above, or a watch):
  // false when there is nothing to read after all (TcpStream::woke_with_input: a receive
  // that found the ring without a free buffer, on a socket with nothing to read).
  bool woke_with_input() { return (tls_ != nullptr && tls_->has_buffered()) || tcp_.woke_with_input(); }
  using PeerState = TcpStream::PeerState;
  PeerState peek() { return tls_ ? tls_->peek(tcp_) : tcp_.peek(); }
  bool peer_closed() { return peek() == PeerState::kClosed; }
  bool silent() { return peek() == PeerState::kSilent; }

  // After every write has gone out (TLS: and close_notify), FIN.
  exec::Task<void> shutdown_write(Deadline dl);
  // TLS: close_notify last, if the socket takes it at once.
  void close();
  tcp::endpoint local_endpoint() const { return tcp_.local_endpoint(); }

 private:
  TcpStream tcp_;
  std::unique_ptr<TlsLayer> tls_;
};

}  // namespace sg::io
