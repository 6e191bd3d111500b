// Header rules at the proxy boundary (proxy/headers.h): a request parsed from arbitrary
// bytes is turned into the upstream request head, with a route whose header operations and
// upgrade allow-list come from the input too. Properties: no crash or sanitizer report; the
// head that goes upstream parses cleanly as one request with the same method; it carries no
// hop-by-hop field of the client's (nor one its Connection named), one Host, our framing only,
// and an Upgrade only for an allowed protocol; the client response head built from a parsed
// response likewise has no hop-by-hop field of the upstream's.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "config/loader.h"
#include "fuzz_common.h"
#include "http/headers.h"
#include "http/parser.h"
#include "proxy/headers.h"

namespace {

using namespace sg;

bool hop_by_hop(std::string_view n) {
  for (const char* h : {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
                        "upgrade", "proxy-authenticate", "proxy-authorization"}) {
    if (http::iequals(n, h)) return true;
  }
  return false;
}

// Splits the input at the first NUL: request bytes, then one name per line for the route's
// `remove`, "name: value" lines for `set`, and a line "upgrades: a b" (all optional).
void route_from(std::string_view spec, config::RouteSection& r) {
  r.upgrades.clear();
  while (!spec.empty()) {
    std::size_t nl = spec.find('\n');
    std::string_view line = spec.substr(0, nl);
    spec.remove_prefix(nl == std::string_view::npos ? spec.size() : nl + 1);
    if (line.rfind("upgrades:", 0) == 0) {
      std::string_view rest = line.substr(9);
      while (!rest.empty()) {
        std::size_t sp = rest.find(' ');
        if (sp != 0) r.upgrades.emplace_back(http::to_lower(rest.substr(0, sp)));
        rest.remove_prefix(sp == std::string_view::npos ? rest.size() : sp + 1);
      }
      continue;
    }
    std::size_t colon = line.find(": ");
    // Only what the config loader accepts (config::header_field_refusal).
    if (colon == std::string_view::npos) {
      if (config::header_name_refusal(line).empty()) r.request_headers.remove.emplace_back(line);
    } else if (config::header_field_refusal(line.substr(0, colon), line.substr(colon + 2)).empty()) {
      r.request_headers.set.emplace_back(std::string(line.substr(0, colon)), std::string(line.substr(colon + 2)));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  std::string_view all(reinterpret_cast<const char*>(data), size);
  std::size_t nul = all.find('\0');
  std::string_view wire = all.substr(0, nul);
  config::RouteSection route;
  if (nul != std::string_view::npos) route_from(all.substr(nul + 1), route);

  http::Parser p(http::Parser::Mode::kRequest, http::ParserLimits{});
  http::ParseResult r = p.feed(wire);
  if (r.event != http::ParseEvent::kHeadDone) return 0;
  const http::RequestHead& req = p.request();

  bool refused = false;
  const std::string upgrade = proxy::allowed_upgrade(req, route.upgrades, refused);
  proxy::ForwardInfo info{"192.0.2.1", "id-1", "http", upgrade, {}};
  std::string head;
  proxy::append_upstream_request_head(head, req, req.path.empty() ? "/" : req.path, &route, info);

  http::Parser again(http::Parser::Mode::kRequest, http::ParserLimits{64 * 1024, 256 * 1024, 4096, 0, 4096});
  http::ParseResult r2 = again.feed(head);
  FUZZ_CHECK(r2.event == http::ParseEvent::kHeadDone);
  FUZZ_CHECK(r2.consumed == head.size() || again.request().body != http::BodyKind::kNone);
  const http::RequestHead& up = again.request();
  FUZZ_CHECK(up.method == req.method);
  FUZZ_CHECK(up.headers.count("host") == 1);
  FUZZ_CHECK(up.headers.count("content-length") + up.headers.count("transfer-encoding") <= 1);
  FUZZ_CHECK(up.body == req.body);
  for (const auto& f : up.headers) {
    if (http::iequals(f.name, "upgrade")) {
      FUZZ_CHECK(!upgrade.empty() && f.value == upgrade);
      continue;
    }
    if (http::iequals(f.name, "connection")) {
      FUZZ_CHECK(!upgrade.empty() && f.value == "upgrade");
      continue;
    }
    if (http::iequals(f.name, "transfer-encoding")) {
      FUZZ_CHECK(req.body == http::BodyKind::kChunked && f.value == "chunked");
      continue;
    }
    FUZZ_CHECK(!hop_by_hop(f.name));
  }
  // Fields the client's Connection named never pass (unless stealgate owns the name).
  for (const auto& f : req.headers) {
    if (!http::iequals(f.name, "connection")) continue;
    http::for_each_list_item(f.value, [&](std::string_view tok) {
      static const char* owned[] = {"host", "content-length", "x-forwarded-for", "x-forwarded-proto",
                                    "x-forwarded-host", "x-request-id", "via", "forwarded", "upgrade",
                                    "connection", "transfer-encoding"};
      for (const char* o : owned) {
        if (http::iequals(tok, o)) return true;
      }
      bool set_by_route = false;
      for (const auto& [k, v] : route.request_headers.set) set_by_route = set_by_route || http::iequals(k, tok);
      if (!set_by_route) FUZZ_CHECK(!up.headers.contains(tok));
      return true;
    });
  }

  // The same bytes as an upstream response: the client head has no upstream hop-by-hop field.
  http::Parser rp(http::Parser::Mode::kResponse, http::ParserLimits{});
  if (rp.feed(wire).event != http::ParseEvent::kHeadDone) return 0;
  std::string client_head;
  proxy::append_client_response_head(client_head, rp.response(), "OK", &route, false, false, false);
  http::Parser cp(http::Parser::Mode::kResponse, http::ParserLimits{64 * 1024, 256 * 1024, 4096, 0, 4096});
  cp.expect_no_body(true);
  FUZZ_CHECK(cp.feed(client_head).event == http::ParseEvent::kHeadDone);
  for (const auto& f : cp.response().headers) {
    if (http::iequals(f.name, "connection") || http::iequals(f.name, "transfer-encoding")) continue;
    FUZZ_CHECK(!hop_by_hop(f.name));
  }
  return 0;
}
