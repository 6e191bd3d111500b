#include "http/path.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace sg::http {
namespace {

struct Out {
  PathError error;
  std::string path;
  bool changed;
};

Out norm(std::string p, PathOptions opt = {}) {
  PathResult r = normalize_path(p, opt);
  return {r.error, r.error == PathError::kNone ? p : std::string(), r.changed};
}

void expect_path(const std::string& in, const std::string& want, PathOptions opt = {}) {
  Out o = norm(in, opt);
  EXPECT_EQ(o.error, PathError::kNone) << in << " -> " << path_error_name(o.error);
  EXPECT_EQ(o.path, want) << in;
  EXPECT_EQ(o.changed, in != want) << in;
}

void expect_error(const std::string& in, PathError e, PathOptions opt = {}) {
  EXPECT_EQ(norm(in, opt).error, e) << in;
}

// RFC 3986 §5.4.1 and §5.4.2: the merged paths of the reference resolution examples
// (base "http://a/b/c/d;p?q"), before dot-segment removal, and what §5.2.4 makes of them.
// The abnormal examples that climb above the root ("../../../g", "/./g" from "../../../../g")
// resolve to "/g" in the RFC; a server has no base to resolve against, so climbing above the
// root is refused (the only reason to send it is to escape a prefix) — tested separately.
TEST(PathTest, Rfc3986Section54Examples) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/b/c/g", "/b/c/g"},        // "g"
      {"/b/c/./g", "/b/c/g"},      // "./g"
      {"/b/c/g/", "/b/c/g/"},      // "g/"
      {"/g", "/g"},                // "/g"
      {"/b/c/d;p", "/b/c/d;p"},    // ""
      {"/b/c/g;x", "/b/c/g;x"},    // "g;x"
      {"/b/c/.", "/b/c/"},         // "."
      {"/b/c/./", "/b/c/"},        // "./"
      {"/b/c/..", "/b/"},          // ".."
      {"/b/c/../", "/b/"},         // "../"
      {"/b/c/../g", "/b/g"},       // "../g"
      {"/b/c/../..", "/"},         // "../.."
      {"/b/c/../../", "/"},        // "../../"
      {"/b/c/../../g", "/g"},      // "../../g"
      {"/./g", "/g"},              // "/./g"
      {"/b/c/g.", "/b/c/g."},      // "g."
      {"/b/c/.g", "/b/c/.g"},      // ".g"
      {"/b/c/g..", "/b/c/g.."},    // "g.."
      {"/b/c/..g", "/b/c/..g"},    // "..g"
      {"/b/c/./../g", "/b/g"},     // "./../g"
      {"/b/c/./g/.", "/b/c/g/"},   // "./g/."
      {"/b/c/g/./h", "/b/c/g/h"},  // "g/./h"
      {"/b/c/g/../h", "/b/c/h"},   // "g/../h"
      {"/b/c/g;x=1/./y", "/b/c/g;x=1/y"},
      {"/b/c/g;x=1/../y", "/b/c/y"},
      // §5.2.4's own walk-through.
      {"/a/b/c/./../../g", "/a/g"},
  };
  for (const auto& [in, want] : cases) expect_path(in, want);
}

TEST(PathTest, ClimbingAboveTheRootIsRefused) {
  expect_error("/..", PathError::kAboveRoot);
  expect_error("/../g", PathError::kAboveRoot);
  expect_error("/b/c/../../../g", PathError::kAboveRoot);  // RFC "../../../g"
  expect_error("/a/../../internal", PathError::kAboveRoot);
  expect_error("/%2e%2e/internal", PathError::kAboveRoot);
}

TEST(PathTest, SpellingsOfOnePathBecomeOne) {
  for (const char* in : {"/internal/x", "//internal/x", "/internal//x", "///internal///x", "/./internal/x",
                         "/a/../internal/x", "/%69nternal/x", "/%69%6E%74%65%72%6E%61%6C/x", "/internal/./x",
                         "/internal/%2e/x", "/internal/%2E%2e/internal/x", "/public/%2e%2e/internal/x",
                         "/public/.%2e/internal/x", "/public/%2E./internal/x", "/internal/y/../x"}) {
    expect_path(in, "/internal/x");
  }
}

TEST(PathTest, PercentEncodingIsNormalized) {
  expect_path("/a%7e%5fb", "/a~_b");             // unreserved: decoded
  expect_path("/a%3fb", "/a%3Fb");                // reserved: kept, hex upper-cased
  expect_path("/a%20b", "/a%20b");
  expect_path("/%252e%252e/x", "/%252e%252e/x");  // an encoded '%' is data: no double decoding
  expect_path("/caf%c3%a9", "/caf%C3%A9");
}

TEST(PathTest, DotSegmentsWithParametersAreRefused) {
  // Tomcat resolves "..;x" as "..": /public/..;/internal would reach /internal there.
  expect_error("/public/..;/internal", PathError::kDotParameters);
  expect_error("/public/..;jsessionid=1/internal", PathError::kDotParameters);
  expect_error("/public/%2e%2e;/internal", PathError::kDotParameters);
  expect_error("/./;/x", PathError::kNone);
  expect_error("/.;/internal", PathError::kDotParameters);
  expect_path("/a;b/c", "/a;b/c");  // parameters on ordinary segments are data
  expect_path("/a/...;x", "/a/...;x");
}

TEST(PathTest, MalformedEncodingAndNulAreRefused) {
  expect_error("/a%", PathError::kMalformedEncoding);
  expect_error("/a%2", PathError::kMalformedEncoding);
  expect_error("/a%zz", PathError::kMalformedEncoding);
  expect_error("/a%%41", PathError::kMalformedEncoding);
  expect_error("/a%00b", PathError::kNul);
  expect_error(std::string("/a\0b", 4), PathError::kNul);
}

TEST(PathTest, EscapedSlashPolicy) {
  // keep (default): never decoded, never a separator (so "..%2f" is not a dot segment).
  expect_path("/a%2fb", "/a%2Fb");
  expect_path("/a/..%2f..%2finternal", "/a/..%2F..%2Finternal");
  expect_path("/a%5Cb", "/a%5Cb");
  PathOptions reject;
  reject.escaped_slashes = SlashPolicy::kReject;
  expect_error("/a%2Fb", PathError::kEscapedSlash, reject);
  expect_error("/a%5cb", PathError::kEscapedSlash, reject);
  expect_path("/a/b", "/a/b", reject);
  PathOptions decode;
  decode.escaped_slashes = SlashPolicy::kDecode;
  expect_path("/a%2Fb", "/a/b", decode);
  expect_path("/a%5Cb", "/a/b", decode);
  expect_path("/public%2f..%2finternal", "/internal", decode);
  expect_error("%2f..", PathError::kNone, decode);  // not a path: left alone
}

TEST(PathTest, BackslashPolicy) {
  expect_path("/a\\b", "/a\\b");
  PathOptions reject;
  reject.backslashes = SlashPolicy::kReject;
  expect_error("/a\\b", PathError::kBackslash, reject);
  PathOptions decode;
  decode.backslashes = SlashPolicy::kDecode;
  expect_path("/public\\..\\internal", "/internal", decode);
}

TEST(PathTest, PathParameterPolicy) {
  expect_path("/a;x/b", "/a;x/b");  // keep (default): RFC 3986 segment text
  PathOptions reject;
  reject.path_parameters = ParamPolicy::kReject;
  expect_error("/admin;x", PathError::kPathParameters, reject);
  expect_error("/a;/b", PathError::kPathParameters, reject);
  expect_path("/a%3Bx", "/a%3Bx", reject);  // an encoded ';' is data
  expect_path("/a/b", "/a/b", reject);
}

TEST(PathTest, RejectPolicyRefusesWhatNormalizeWouldChange) {
  PathOptions r;
  r.policy = PathPolicy::kReject;
  expect_path("/a/b/", "/a/b/", r);
  expect_path("/a%3Fb", "/a%3Fb", r);
  expect_error("/a//b", PathError::kNotNormal, r);
  expect_error("/a/./b", PathError::kNotNormal, r);
  expect_error("/%61", PathError::kNotNormal, r);
  expect_error("/a%3fb", PathError::kNotNormal, r);  // lower-case hex is not normal either
  expect_error("/../a", PathError::kAboveRoot, r);
}

TEST(PathTest, OffLeavesThePathAlone) {
  PathOptions off;
  off.policy = PathPolicy::kOff;
  expect_path("/a/../b//%2e", "/a/../b//%2e", off);
}

TEST(PathTest, ResultIsIdempotentAndNeverLonger) {
  for (const char* in : {"/a/b/../c/./d//e/", "/%41%2f%2E/..", "/x/%2e%2E/%7E", "/a/b/c/../../..", "/."}) {
    std::string p = in;
    ASSERT_EQ(normalize_path(p, {}).error, PathError::kNone) << in;
    EXPECT_LE(p.size(), std::string(in).size());
    std::string again = p;
    PathResult r = normalize_path(again, {});
    EXPECT_EQ(r.error, PathError::kNone);
    EXPECT_FALSE(r.changed) << p;
    EXPECT_EQ(again, p);
  }
}

TEST(PathTest, AuthorityIsFoldedForMatching) {
  auto fold = [](std::string a) {
    return normalize_authority(a) ? a : std::string("<refused>");
  };
  EXPECT_EQ(fold("Internal.Example.COM"), "internal.example.com");
  EXPECT_EQ(fold("internal.example.com."), "internal.example.com");
  EXPECT_EQ(fold("internal.example.com.:8080"), "internal.example.com:8080");
  EXPECT_EQ(fold("internal.example.com..:80"), "internal.example.com:80");
  EXPECT_EQ(fold("[::1]:80"), "[::1]:80");
  EXPECT_EQ(fold("[FE80::1]"), "[fe80::1]");
  EXPECT_EQ(fold("%69nternal.example.com"), "<refused>");
  EXPECT_EQ(fold("."), "<refused>");
  EXPECT_EQ(fold("127.0.0.1:80"), "127.0.0.1:80");
}

}  // namespace
}  // namespace sg::http
