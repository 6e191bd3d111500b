#include "io/proxy_protocol.h"

namespace sg::io {

exec::Task<ProxyHeader> read_proxy_header(TcpStream& s, Deadline dl) {
  // Peek, parse, then take exactly the header's bytes: what follows (a TLS ClientHello, a
  // request) stays for the reads after. A header still incomplete is taken as far as it
  // goes (all of it is header), so the next wait is for bytes not yet here.
  std::string seen;
  std::string peeked(kMostProxyHeaderBytes, '\0');
  for (;;) {
    std::optional<IoResult> got = s.peek_some(std::span<char>(peeked.data(), kMostProxyHeaderBytes - seen.size()));
    if (!got) {
      EitherReadable w = co_await s.wait_readable(nullptr, dl);
      if (w.ec == std::errc::timed_out) co_return ProxyHeader::invalid("no PROXY protocol header in time");
      if (w.ec) co_return ProxyHeader::invalid(w.ec.message());
      continue;
    }
    if (got->ec || got->n == 0) {
      co_return ProxyHeader::invalid("the connection closed before its PROXY protocol header");
    }
    const std::string_view fresh(peeked.data(), got->n);
    const std::string whole = seen + std::string(fresh);
    ProxyHeader h = parse_proxy_header(whole);
    if (h.status == ProxyHeader::Status::kInvalid) co_return h;
    const std::size_t take = h.status == ProxyHeader::Status::kDone ? h.length - seen.size() : got->n;
    for (std::size_t left = take; left > 0;) {
      IoResult r = co_await s.read_some(std::span<char>(peeked.data(), left), dl);
      if (r.ec || r.n == 0) {
        co_return ProxyHeader::invalid("the connection closed during its PROXY protocol header");
      }
      left -= r.n;
    }
    if (h.status == ProxyHeader::Status::kDone) co_return h;
    if (whole.size() >= kMostProxyHeaderBytes) co_return ProxyHeader::invalid("a PROXY protocol header too long");
    seen = whole;
  }
}

}  // namespace sg::io
