// HeaderMap keeps cleared and removed field lines as spares whose strings are reused by
// the next message (http/headers.h): what a map holds must never show a spare, however
// lines were added, removed, replaced, copied or moved in between.
#include "http/headers.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace sg::http {
namespace {

std::vector<std::pair<std::string, std::string>> lines(const HeaderMap& h) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : h) out.emplace_back(f.name, f.value);
  return out;
}

using Lines = std::vector<std::pair<std::string, std::string>>;

// iequals compares eight bytes at a time (a word lowercased with bit tricks) and the rest
// one by one: every pair of byte values, in a word and in the tail, must give what a plain
// ASCII case-insensitive comparison gives.
TEST(Iequals, AgreesWithAsciiCaseFoldingForEveryBytePair) {
  auto fold = [](unsigned char c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; };
  std::string a = "Content-Length", b = "content-length";
  ASSERT_TRUE(iequals(a, b));
  for (std::size_t at : {std::size_t{2}, std::size_t{7}, std::size_t{11}}) {  // word, word, tail
    for (int x = 0; x < 256; ++x) {
      for (int y = 0; y < 256; ++y) {
        std::string s = a, t = b;
        s[at] = static_cast<char>(x);
        t[at] = static_cast<char>(y);
        const bool want = fold(static_cast<unsigned char>(x)) == fold(static_cast<unsigned char>(y));
        ASSERT_EQ(iequals(s, t), want) << "byte " << at << ": " << x << " vs " << y;
      }
    }
  }
  EXPECT_FALSE(iequals("host", "hosts"));
  EXPECT_TRUE(iequals("", ""));
  EXPECT_TRUE(iequals("X-FORWARDED-FOR", "x-forwarded-for"));
  EXPECT_FALSE(iequals("x-forwarded-for", "x-forwarded-fox"));
}

TEST(HeaderMap, ClearedMapShowsOnlyTheNextMessagesLines) {
  HeaderMap h;
  h.add_copy("Date", "Fri, 04 Dec 2026 00:00:00 GMT");
  h.add_copy("Content-Type", "application/octet-stream");
  h.add_copy("X-Long", std::string(1000, 'x'));
  h.clear();
  EXPECT_TRUE(h.empty());
  EXPECT_EQ(h.get("Date"), nullptr);
  EXPECT_EQ(h.begin(), h.end());
  h.add_copy("Host", "a");
  EXPECT_EQ(lines(h), (Lines{{"Host", "a"}}));
  EXPECT_EQ(h.get("Content-Type"), nullptr);
  EXPECT_EQ(h.count("X-Long"), 0u);
}

TEST(HeaderMap, RemoveKeepsOrderAndHidesRemovedLines) {
  HeaderMap h;
  h.add_copy("A", std::string(300, 'a'));
  h.add_copy("B", "b1");
  h.add_copy("C", std::string(400, 'c'));
  h.add_copy("b", "b2");
  EXPECT_EQ(h.remove("B"), 2u);
  EXPECT_EQ(lines(h), (Lines{{"A", std::string(300, 'a')}, {"C", std::string(400, 'c')}}));
  h.add_copy("D", "d");
  EXPECT_EQ(lines(h), (Lines{{"A", std::string(300, 'a')}, {"C", std::string(400, 'c')}, {"D", "d"}}));
  h.set("a", "one");
  EXPECT_EQ(lines(h), (Lines{{"C", std::string(400, 'c')}, {"D", "d"}, {"a", "one"}}));
  EXPECT_EQ(h.joined("d"), "d");
}

TEST(HeaderMap, CopyAndMoveCarryOnlyLiveLines) {
  HeaderMap h;
  for (int i = 0; i < 6; ++i) h.add_copy("F" + std::to_string(i), "v");
  h.clear();
  h.add_copy("Keep", "k");
  HeaderMap copy = h;
  EXPECT_EQ(lines(copy), (Lines{{"Keep", "k"}}));
  HeaderMap assigned;
  assigned.add_copy("Old", "o");
  assigned = h;
  EXPECT_EQ(lines(assigned), (Lines{{"Keep", "k"}}));
  HeaderMap moved = std::move(h);
  EXPECT_EQ(lines(moved), (Lines{{"Keep", "k"}}));
  EXPECT_TRUE(h.empty());  // NOLINT(bugprone-use-after-move): a moved-from map is empty
  h.add_copy("Again", "a");
  EXPECT_EQ(lines(h), (Lines{{"Again", "a"}}));
  HeaderMap target;
  target.add_copy("X", "x");
  target = std::move(moved);
  EXPECT_EQ(lines(target), (Lines{{"Keep", "k"}}));
  EXPECT_EQ(moved.size(), 0u);  // NOLINT(bugprone-use-after-move)
}

TEST(HeaderMap, TokensAndListsSeeOnlyLiveLines) {
  HeaderMap h;
  h.add_copy("Connection", "close");
  h.clear();
  h.add_copy("Connection", "keep-alive");
  EXPECT_FALSE(h.has_token("connection", "close"));
  EXPECT_TRUE(h.has_token("connection", "Keep-Alive"));
  h.add("Via", "1.1 a");
  h.add("via", "1.1 b");
  EXPECT_EQ(h.joined("VIA"), "1.1 a, 1.1 b");
  EXPECT_EQ(h.remove_if([](const Header& f) { return f.value == "keep-alive"; }), 1u);
  EXPECT_EQ(h.size(), 2u);
}

}  // namespace
}  // namespace sg::http
