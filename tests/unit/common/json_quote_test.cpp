// json_quote: a JSON string literal that is valid UTF-8 whatever bytes it is given.
// text_safe: a text log field that no bytes can break out of.
#include <gtest/gtest.h>

#include <string>

#include "common/log.h"

namespace sg::log {
namespace {

TEST(JsonQuote, EscapesWhatJsonRequires) {
  EXPECT_EQ(json_quote("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(json_quote("\n\r\t"), R"("\n\r\t")");
  EXPECT_EQ(json_quote(std::string("\x01\x1f", 2)), R"("\u0001\u001f")");
  EXPECT_EQ(json_quote(std::string("a\0b", 3)), R"("a\u0000b")");
  EXPECT_EQ(json_quote("\x7f"), "\"\x7f\"");  // DEL needs no escape
}

TEST(JsonQuote, WellFormedUtf8PassesThrough) {
  for (const char* s : {"caf\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf", "\xed\x9f\xbf"}) {
    EXPECT_EQ(json_quote(s), std::string("\"") + s + "\"") << s;
  }
}

TEST(JsonQuote, EachByteOfAMalformedSequenceIsAReplacementCharacter) {
  const std::string r = "\\ufffd";
  EXPECT_EQ(json_quote("gz\xffip"), "\"gz" + r + "ip\"");              // never a lead byte
  EXPECT_EQ(json_quote("\x80x"), "\"" + r + "x\"");                     // a lone continuation
  EXPECT_EQ(json_quote("\xc3"), "\"" + r + "\"");                       // cut short at the end
  EXPECT_EQ(json_quote("\xc3x"), "\"" + r + "x\"");                     // cut short by ASCII
  EXPECT_EQ(json_quote("\xc0\xaf"), "\"" + r + r + "\"");               // overlong '/'
  EXPECT_EQ(json_quote("\xe0\x80\xaf"), "\"" + r + r + r + "\"");       // overlong, 3 bytes
  EXPECT_EQ(json_quote("\xed\xa0\x80"), "\"" + r + r + r + "\"");       // a UTF-16 surrogate
  EXPECT_EQ(json_quote("\xf4\x90\x80\x80"), "\"" + r + r + r + r + "\"");  // above U+10FFFF
  EXPECT_EQ(json_quote("\xf5\x80"), "\"" + r + r + "\"");
  EXPECT_EQ(json_quote("\xe2\x82\"\xac"), "\"" + r + r + "\\\"" + r + "\"");  // broken by a quote
}

TEST(TextSafe, APlainValueIsItself) {
  std::string scratch;
  const std::string target = "/api/v1/items?q=a b";
  std::string_view out = log::text_safe(target, scratch);
  EXPECT_EQ(out, target);
  EXPECT_EQ(out.data(), target.data());  // no copy
}

TEST(TextSafe, NoValueCanEndItsQuotes) {
  std::string scratch;
  EXPECT_EQ(text_safe("gzip, chunked\" route=\"admin", scratch), R"(gzip, chunked\" route=\"admin)");
  EXPECT_EQ(text_safe("a\\b", scratch), R"(a\\b)");
  EXPECT_EQ(text_safe("gz\xffip\x01\x7f", scratch), R"(gz\xFFip\x01\x7F)");
  EXPECT_EQ(text_safe(std::string("a\nb\0", 4), scratch), R"(a\x0Ab\x00)");
  // Unquoted (a TLS server name): a space would start another field.
  EXPECT_EQ(text_safe("a.example route=x", scratch, false), R"(a.example\x20route=x)");
  EXPECT_EQ(text_safe("a.example", scratch, false), "a.example");
}

}  // namespace
}  // namespace sg::log
