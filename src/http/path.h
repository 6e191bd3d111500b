// Request path normalization before routing (RFC 3986 §6.2.2 syntax-based normalization and
// §5.2.4 dot-segment removal, plus merging of repeated slashes), so that an access rule on
// /internal holds against every spelling of it (/a/../internal, /%69nternal, //internal,
// /internal/./x, /%2e%2e/internal ...): the class of Envoy's CVE-2019-9901 and
// CVE-2021-29492. The normalized path is what routes match and what goes upstream.
//
// What normalize_path() does, in order:
//   1. percent-decoding of unreserved characters (ALPHA DIGIT - . _ ~), upper-casing the hex
//      digits of every other percent-encoding; malformed encodings and an encoded NUL are
//      refused;
//   2. encoded slashes (%2F, %5C) and bare backslashes by the caller's policy: kept as
//      ordinary characters (never separators), refused, or turned into "/"; a ';' (path
//      parameters) kept or refused;
//   3. dot segments removed and empty segments ("//") merged; a ".." above the root is
//      refused (it can only be an attempt to escape a prefix), and so is a dot segment
//      with parameters ("/public/..;/internal"), which servlet containers resolve as "..".
// The result is idempotent, has no dot segment and no "//", and is never longer than the
// input (the fuzz target tests/fuzz/fuzz_path.cpp checks these properties).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sg::http {

enum class PathPolicy : uint8_t {
  kNormalize,  // normalize (the default)
  kReject,     // answer 400 to any path that is not already normal
  kOff,        // route on the path as received (unsafe behind access rules)
};

enum class SlashPolicy : uint8_t {
  kKeep,    // %2F / %5C / '\' stay as they are: never decoded, never a separator
  kReject,  // 400
  kDecode,  // become "/" (a separator)
};

// A ';' in a segment: RFC 3986 makes it ordinary segment text, but servlet containers
// (Tomcat, Jetty) cut "/admin;x" to "/admin", past a route written for /admin.
enum class ParamPolicy : uint8_t {
  kKeep,    // an ordinary character
  kReject,  // 400
};

struct PathOptions {
  PathPolicy policy = PathPolicy::kNormalize;
  SlashPolicy escaped_slashes = SlashPolicy::kKeep;  // %2F and %5C
  SlashPolicy backslashes = SlashPolicy::kKeep;      // a bare '\'
  ParamPolicy path_parameters = ParamPolicy::kKeep;  // a bare ';' (an encoded one is data)
};

enum class PathError : uint8_t {
  kNone,
  kMalformedEncoding,  // '%' not followed by two hex digits
  kNul,                // NUL (encoded or not)
  kEscapedSlash,       // %2F or %5C under SlashPolicy::kReject
  kBackslash,          // '\' under SlashPolicy::kReject
  kAboveRoot,          // a ".." segment that climbs above "/"
  kNotNormal,          // PathPolicy::kReject and the path would change
  kDotParameters,      // "..;x" or ".;x": a dot segment with parameters, which Tomcat and
                       // other servlet containers resolve as ".." / "." (RFC 3986 does not)
  kPathParameters,     // ';' under ParamPolicy::kReject
};
inline constexpr int kPathErrorCount = 9;
std::string_view path_error_name(PathError e);  // "malformed_encoding", ... (metric labels)

struct PathResult {
  PathError error = PathError::kNone;
  bool changed = false;  // the path was rewritten (only without an error)
};

// Normalizes `path` (an origin-form path starting with '/', without the query) in place.
// On an error `path` is unspecified and the request must be answered 400.
PathResult normalize_path(std::string& path, const PathOptions& opt);

// Normalizes a Host / absolute-form authority for matching: lower-case, one trailing dot of
// a name removed ("Internal.Example.COM.:80" -> "internal.example.com:80"). False for a
// percent-encoded host, which no route could be written against.
bool normalize_authority(std::string& authority);

}  // namespace sg::http
