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

exec::Task<void> Stream::shutdown_write(Deadline dl) {
  if (tls_ && tcp_.is_open()) {
    const std::string alert = tls_->close_notify();
    if (!alert.empty()) (void)co_await tcp_.write_all(alert, dl);
  }
  co_await tcp_.shutdown_write(dl);
}

void Stream::close() {
  if (tls_ && tcp_.is_open()) {
    tcp_.close(tls_->close_notify());
    return;
  }
  tcp_.close();
}

}  // namespace sg::io
