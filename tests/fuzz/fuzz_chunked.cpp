// Chunked decoding of a request body: a fixed head, then arbitrary bytes as the chunked body,
// fed in pieces whose size comes from the input. Properties: no crash or sanitizer report;
// decoded bytes never exceed the encoded ones; when the message completes, the decoded body
// is exactly what a strict reference decoder makes of the input.
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "fuzz_common.h"
#include "http/parser.h"

namespace {

// A strict reference decoder (RFC 9112 §7.1) for the body only: chunk-size [ext] CRLF data CRLF
// ... 0 CRLF trailers CRLF. Returns the decoded body, or nullopt where it is not well-formed or
// incomplete. Extensions and trailers are skipped without validation (the parser may be
// stricter there: only the accepting direction is compared).
std::optional<std::string> reference_decode(const std::string& in) {
  std::string out;
  std::size_t i = 0;
  for (;;) {
    std::size_t eol = in.find("\r\n", i);
    if (eol == std::string::npos) return std::nullopt;
    std::string line = in.substr(i, eol - i);
    std::size_t semi = line.find(';');
    std::string hex = line.substr(0, semi);
    if (hex.empty()) return std::nullopt;
    hex.erase(0, std::min(hex.find_first_not_of('0'), hex.size() - 1));  // leading zeros are fine
    if (hex.size() > 15) return std::nullopt;
    uint64_t n = 0;
    for (char c : hex) {
      int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) return std::nullopt;
      n = n * 16 + static_cast<uint64_t>(d);
    }
    i = eol + 2;
    if (n == 0) return out;  // trailers follow; not compared
    if (in.size() - i < n + 2 || in.compare(i + n, 2, "\r\n") != 0) return std::nullopt;
    out.append(in, i, n);
    i += n + 2;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t step = 1 + data[0] % 32;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string buf = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" + body;
  sg::http::Parser p(sg::http::Parser::Mode::kRequest, sg::http::ParserLimits{});
  std::string decoded;
  bool done = false, failed = false;
  std::size_t off = 0, fed = 0;
  for (int guard = 0; !done && !failed; ++guard) {
    FUZZ_CHECK(guard < 1000000);
    fed = std::max(fed, std::min(buf.size(), off + step));
    sg::http::ParseResult r = p.feed(buf.data() + off, fed - off);
    for (auto v : p.body()) decoded.append(v);
    off += r.consumed;
    if (r.event == sg::http::ParseEvent::kError) failed = true;
    if (r.event == sg::http::ParseEvent::kMessageDone) done = true;
    if (r.event == sg::http::ParseEvent::kNeedMore && fed == buf.size()) break;
  }
  FUZZ_CHECK(decoded.size() <= body.size());
  if (done) {
    std::optional<std::string> want = reference_decode(body);
    FUZZ_CHECK(want.has_value());  // the parser accepted only what is well-formed
    FUZZ_CHECK(*want == decoded);
  }
  if (failed) FUZZ_CHECK(p.error_status() == 400 || p.error_status() == 413 || p.error_status() == 431);
  return 0;
}
