// Request parsing with body framing: arbitrary bytes fed in pieces whose sizes come from the
// input itself (so a head or a chunk-size line is split at every place). Properties: no
// crash or sanitizer report; an error has one of the statuses the parser documents; a head
// that parsed has a framing that is one of CL/chunked/none and never both; decoded body bytes
// never exceed what was fed; the same bytes fed whole are refused or accepted alike (the
// status may differ: which violation is seen first depends on the split), with the same
// messages and body when accepted.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "http/parser.h"

namespace {

using sg::http::BodyKind;
using sg::http::ParseEvent;
using sg::http::Parser;

struct Outcome {
  int status = 0;
  int heads = 0;
  int messages = 0;
  uint64_t body = 0;
};

Outcome run(const std::string& wire, std::size_t first_split) {
  std::string buf = wire;
  Parser p(Parser::Mode::kRequest, sg::http::ParserLimits{});
  Outcome o;
  std::size_t off = 0, fed = 0;
  for (int guard = 0;; ++guard) {
    FUZZ_CHECK(guard < 100000);  // no feed loop that makes no progress
    std::size_t step = fed == 0 ? first_split : buf.size();
    fed = std::max(fed, std::min(buf.size(), off + step));
    sg::http::ParseResult r = p.feed(buf.data() + off, fed - off);
    FUZZ_CHECK(r.consumed <= fed - off);
    for (auto v : p.body()) {
      FUZZ_CHECK(v.data() >= buf.data() && v.data() + v.size() <= buf.data() + buf.size());
      o.body += v.size();
    }
    off += r.consumed;
    if (r.event == ParseEvent::kError) {
      o.status = p.error_status();
      return o;
    }
    if (r.event == ParseEvent::kHeadDone) {
      ++o.heads;
      const auto& req = p.request();
      FUZZ_CHECK(req.body == BodyKind::kNone || req.body == BodyKind::kContentLength ||
                 req.body == BodyKind::kChunked);
      FUZZ_CHECK(!(req.body == BodyKind::kChunked && req.headers.contains("content-length")));
      FUZZ_CHECK(req.headers.count("host") <= 1);
      FUZZ_CHECK(!req.method.empty());
    }
    if (r.event == ParseEvent::kMessageDone) ++o.messages;
    if (r.event == ParseEvent::kNeedMore && fed == buf.size()) break;
  }
  FUZZ_CHECK(o.body <= wire.size());
  return o;
}

bool documented(int status) {
  switch (status) {
    case 0: case 400: case 413: case 414: case 417: case 431: case 501: case 505: return true;
    default: return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t split = 1 + data[0] % 64;
  const std::string wire(reinterpret_cast<const char*>(data + 1), size - 1);
  Outcome split_run = run(wire, split);
  Outcome whole = run(wire, wire.size() + 1);
  FUZZ_CHECK(documented(split_run.status));
  FUZZ_CHECK(documented(whole.status));
  FUZZ_CHECK((split_run.status == 0) == (whole.status == 0));
  if (whole.status == 0) {
    FUZZ_CHECK(split_run.messages == whole.messages);
    FUZZ_CHECK(split_run.body == whole.body);
  }
  return 0;
}
