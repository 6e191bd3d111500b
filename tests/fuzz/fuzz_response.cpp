// Response parsing (what an upstream sends): arbitrary bytes, optionally as the answer to a
// HEAD request, then the connection closes. Properties: no crash or sanitizer report; every
// error is a 502; a response answering HEAD, or a 1xx/204/304, has no body bytes; decoded body
// bytes never exceed what was fed.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "http/parser.h"

using sg::http::BodyKind;
using sg::http::ParseEvent;
using sg::http::Parser;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  bool head = data[0] & 1;  // the first final response answers a HEAD request
  std::string buf(reinterpret_cast<const char*>(data + 1), size - 1);
  Parser p(Parser::Mode::kResponse, sg::http::ParserLimits{});
  p.expect_no_body(head);
  uint64_t body = 0;
  bool bodiless = false;
  std::size_t off = 0;
  for (int guard = 0;; ++guard) {
    FUZZ_CHECK(guard < 100000);
    sg::http::ParseResult r = p.feed(buf.data() + off, buf.size() - off);
    for (auto v : p.body()) body += v.size();
    if (bodiless) FUZZ_CHECK(p.body().empty());
    off += r.consumed;
    if (r.event == ParseEvent::kError) {
      FUZZ_CHECK(p.error_status() == 502);
      break;
    }
    if (r.event == ParseEvent::kHeadDone) {
      const auto& resp = p.response();
      bodiless = head || resp.is_informational() || resp.status == 204 || resp.status == 304;
      if (bodiless) FUZZ_CHECK(resp.body == BodyKind::kNone);
      if (resp.body == BodyKind::kUntilClose) FUZZ_CHECK(!resp.keep_alive);
    }
    if (r.event == ParseEvent::kMessageDone) {
      // Only the final response answers the HEAD; interim ones come before it.
      if (!p.response().is_informational()) {
        head = false;
        p.expect_no_body(false);
      }
      bodiless = false;
    }
    if (r.event == ParseEvent::kNeedMore) {
      sg::http::ParseResult f = p.finish();
      for (auto v : p.body()) body += v.size();
      if (f.event == ParseEvent::kError) FUZZ_CHECK(p.error_status() == 502);
      break;
    }
  }
  FUZZ_CHECK(body <= buf.size());
  return 0;
}
