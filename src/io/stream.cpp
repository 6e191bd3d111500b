#include "io/stream.h"

namespace sg::io {

exec::Task<std::error_code> Stream::accept_tls(SSL_CTX* ctx, std::shared_ptr<const void> owner, Deadline dl) {
  tls_ = TlsLayer::server(ctx, std::move(owner));
  if (!tls_) co_return make_error_code(TlsErrc::kHandshake);
  co_return co_await tls_->handshake(tcp_, dl);
}

exec::Task<std::error_code> Stream::connect_tls(SSL_CTX* ctx, std::string server_name, Deadline dl,
                                                std::shared_ptr<TlsSessionSlot> resume) {
  tls_ = TlsLayer::client(ctx, server_name, std::move(resume));
  if (!tls_) co_return make_error_code(TlsErrc::kHandshake);
  co_return co_await tls_->handshake(tcp_, dl);
}

exec::Task<std::error_code> Stream::write_all(std::string_view data, Deadline dl) {
  std::string_view one[1] = {data};
  co_return co_await write_all(std::span<const std::string_view>(one), dl);
}

void Stream::shutdown_write() {
  if (tls_) tls_->close_notify(tcp_);
  tcp_.shutdown_write();
}

void Stream::close() {
  if (tls_ && tcp_.is_open()) tls_->close_notify(tcp_);
  tcp_.close();
}

}  // namespace sg::io
