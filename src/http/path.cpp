#include "http/path.h"

namespace sg::http {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool is_unreserved(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

constexpr char kHex[] = "0123456789ABCDEF";

// Step 1 and 2 of the header comment: `in` decoded into `out`, where every '/' is a
// separator and every other byte is segment text.
PathError decode(std::string_view in, std::string& out, const PathOptions& opt) {
  out.clear();
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '\0') return PathError::kNul;
    if (c == ';' && opt.path_parameters == ParamPolicy::kReject) return PathError::kPathParameters;
    if (c == '\\') {
      if (opt.backslashes == SlashPolicy::kReject) return PathError::kBackslash;
      out += opt.backslashes == SlashPolicy::kDecode ? '/' : '\\';
      continue;
    }
    if (c != '%') {
      out += c;
      continue;
    }
    if (in.size() - i < 3) return PathError::kMalformedEncoding;
    const int h = hex_value(in[i + 1]);
    const int l = hex_value(in[i + 2]);
    if (h < 0 || l < 0) return PathError::kMalformedEncoding;
    const auto b = static_cast<unsigned char>(h * 16 + l);
    i += 2;
    if (b == 0) return PathError::kNul;
    if (is_unreserved(b)) {
      out += static_cast<char>(b);
      continue;
    }
    if (b == '/' || b == '\\') {
      if (opt.escaped_slashes == SlashPolicy::kReject) return PathError::kEscapedSlash;
      if (opt.escaped_slashes == SlashPolicy::kDecode) {
        out += '/';
        continue;
      }
    }
    out += '%';
    out += kHex[b >> 4];
    out += kHex[b & 0xF];
  }
  return PathError::kNone;
}

// Step 3: dot segments removed, empty segments merged, from `in` (starting with '/') into
// `out`.
PathError remove_dot_segments(std::string_view in, std::string& out) {
  out.clear();
  out.reserve(in.size());
  std::size_t depth = 0;
  bool trailing_slash = false;  // the last segment seen leaves the path ending in '/'
  std::size_t i = 1;
  for (;;) {
    std::size_t j = in.find('/', i);
    if (j == std::string_view::npos) j = in.size();
    const std::string_view seg = in.substr(i, j - i);
    if (seg.rfind("..;", 0) == 0 || seg.rfind(".;", 0) == 0) return PathError::kDotParameters;
    if (seg.empty() || seg == ".") {
      trailing_slash = true;
    } else if (seg == "..") {
      if (depth == 0) return PathError::kAboveRoot;
      out.resize(out.rfind('/'));
      --depth;
      trailing_slash = true;
    } else {
      out += '/';
      out += seg;
      ++depth;
      trailing_slash = false;
    }
    if (j == in.size()) break;
    i = j + 1;
  }
  if (trailing_slash || out.empty()) out += '/';
  return PathError::kNone;
}

// True when normalization cannot change `p` (most request paths): no percent-encoding, no
// NUL, no backslash or ';' that the policy touches, no empty segment and no segment starting with
// '.' (dot segments, with or without parameters, are among those). Such a path is left as it
// is without the two copying passes.
bool plainly_normal(std::string_view p, const PathOptions& opt) {
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '%' || c == '\0') return false;
    if (c == '\\' && opt.backslashes != SlashPolicy::kKeep) return false;
    if (c == ';' && opt.path_parameters != ParamPolicy::kKeep) return false;
    if (c == '/' && i + 1 < p.size() && (p[i + 1] == '/' || p[i + 1] == '.')) return false;
  }
  return true;
}

}  // namespace

std::string_view path_error_name(PathError e) {
  switch (e) {
    case PathError::kNone: return "none";
    case PathError::kMalformedEncoding: return "malformed_encoding";
    case PathError::kNul: return "nul";
    case PathError::kEscapedSlash: return "escaped_slash";
    case PathError::kBackslash: return "backslash";
    case PathError::kAboveRoot: return "above_root";
    case PathError::kNotNormal: return "not_normal";
    case PathError::kDotParameters: return "dot_parameters";
    case PathError::kPathParameters: return "path_parameters";
  }
  return "unknown";
}

PathResult normalize_path(std::string& path, const PathOptions& opt) {
  if (opt.policy == PathPolicy::kOff || path.empty() || path.front() != '/') return {};
  if (plainly_normal(path, opt)) return {};
  // Per-thread scratch: normalization runs for every request, its buffers stay warm.
  thread_local std::string decoded, normal;
  if (PathError e = decode(path, decoded, opt); e != PathError::kNone) return {e, false};
  if (PathError e = remove_dot_segments(decoded, normal); e != PathError::kNone) return {e, false};
  if (normal == path) return {};
  if (opt.policy == PathPolicy::kReject) return {PathError::kNotNormal, false};
  path.assign(normal);
  return {PathError::kNone, true};
}

bool normalize_authority(std::string& a) {
  if (a.find('%') != std::string::npos) return false;
  for (char& c : a) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + ('a' - 'A'));
  }
  if (!a.empty() && a.front() == '[') return true;  // IP literal: nothing else to fold
  std::size_t colon = a.rfind(':');
  std::size_t host_end = colon == std::string::npos ? a.size() : colon;
  std::size_t dots = 0;
  while (dots < host_end && a[host_end - 1 - dots] == '.') ++dots;
  if (dots == 0) return true;
  if (dots == host_end) return false;  // a host of dots only
  a.erase(host_end - dots, dots);
  return true;
}

}  // namespace sg::http
