// Path normalization (http/path.h), under every policy combination chosen by the first byte.
// Properties of an accepted path: idempotent; starts with '/', has no dot segment and no
// "//"; never longer than the input; no percent-encoding of an unreserved character and only
// upper-case hex; no NUL. Under kReject, an accepted path is unchanged.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "http/path.h"

using namespace sg::http;

namespace {

bool has_dot_segment(const std::string& p) {
  std::size_t i = 0;
  while (i < p.size()) {
    std::size_t j = p.find('/', i + 1);
    if (j == std::string::npos) j = p.size();
    std::string seg = p.substr(i + 1, j - i - 1);
    if (seg == "." || seg == "..") return true;
    i = j;
  }
  return false;
}

bool encodes_unreserved_or_lower_hex(const std::string& p) {
  auto upper_hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] != '%') continue;
    if (p.size() - i < 3 || !upper_hex(p[i + 1]) || !upper_hex(p[i + 2])) return true;
    const char h = p[i + 1], l = p[i + 2];
    const int v = (h <= '9' ? h - '0' : h - 'A' + 10) * 16 + (l <= '9' ? l - '0' : l - 'A' + 10);
    const bool unreserved = (v >= 'a' && v <= 'z') || (v >= 'A' && v <= 'Z') || (v >= '0' && v <= '9') ||
                            v == '-' || v == '.' || v == '_' || v == '~';
    if (unreserved) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  PathOptions opt;
  opt.policy = static_cast<PathPolicy>(data[0] % 2);  // normalize, reject (off does nothing)
  opt.escaped_slashes = static_cast<SlashPolicy>((data[0] >> 1) % 3);
  opt.backslashes = static_cast<SlashPolicy>((data[0] >> 3) % 3);
  opt.path_parameters = static_cast<ParamPolicy>((data[0] >> 5) % 2);
  const std::string in = "/" + std::string(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string p = in;
  PathResult r = normalize_path(p, opt);
  if (r.error != PathError::kNone) return 0;
  FUZZ_CHECK(!p.empty() && p.front() == '/');
  FUZZ_CHECK(p.size() <= in.size());
  FUZZ_CHECK(p.find("//") == std::string::npos);
  FUZZ_CHECK(!has_dot_segment(p));
  FUZZ_CHECK(p.find('\0') == std::string::npos);
  FUZZ_CHECK(!encodes_unreserved_or_lower_hex(p));
  FUZZ_CHECK(r.changed == (p != in));
  if (opt.policy == PathPolicy::kReject) FUZZ_CHECK(!r.changed);
  if (opt.backslashes != SlashPolicy::kKeep) FUZZ_CHECK(p.find('\\') == std::string::npos);
  if (opt.path_parameters == ParamPolicy::kReject) FUZZ_CHECK(p.find(';') == std::string::npos);
  std::string again = p;
  PathResult r2 = normalize_path(again, opt);
  FUZZ_CHECK(r2.error == PathError::kNone);
  FUZZ_CHECK(!r2.changed);
  FUZZ_CHECK(again == p);
  return 0;
}
