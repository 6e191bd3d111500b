#include "http/headers.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace sg::http {

namespace {
char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + ('a' - 'A')) : c; }

// Eight bytes lowercased at once: a byte in 'A'..'Z' gains 0x20, every other byte is kept.
// Per byte of x & 0x7f..: adding 0x3f sets the top bit from 'A' (0x41) up, adding 0x25 from
// '[' (0x5b) up (no carry crosses bytes: both sums stay below 0x100); a byte with its own
// top bit set (not ASCII) is excluded.
uint64_t lower8(uint64_t x) {
  constexpr uint64_t kOnes = 0x0101010101010101ULL;
  const uint64_t low7 = x & (0x7f * kOnes);
  const uint64_t upper = ((low7 + 0x3f * kOnes) ^ (low7 + 0x25 * kOnes)) & ~x & (0x80 * kOnes);
  return x | (upper >> 2);
}

bool iequal_byte(char x, char y) { return x == y || lower(x) == lower(y); }
}  // namespace

// (Runs for every field name looked up, several times per message: a word at a time.)
bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  const char* p = a.data();
  const char* q = b.data();
  std::size_t n = a.size();
  for (; n >= 8; n -= 8, p += 8, q += 8) {
    uint64_t x, y;
    std::memcpy(&x, p, 8);
    std::memcpy(&y, q, 8);
    if (x != y && lower8(x) != lower8(y)) return false;
  }
  for (; n > 0; --n, ++p, ++q) {
    if (!iequal_byte(*p, *q)) return false;
  }
  return true;
}

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = lower(c);
  return out;
}

std::string_view trim_ows(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool list_has_token(std::string_view list, std::string_view token) noexcept {
  bool found = false;
  for_each_list_item(list, [&](std::string_view item) {
    found = iequals(item, token);
    return !found;
  });
  return found;
}

HeaderMap& HeaderMap::operator=(const HeaderMap& o) {
  if (this != &o) {
    fields_.assign(o.begin(), o.end());
    size_ = o.size_;
    may_hold_long_ = true;  // assign() may have kept a long buffer of ours under a short value
  }
  return *this;
}

HeaderMap& HeaderMap::operator=(HeaderMap&& o) noexcept {
  if (this != &o) {
    fields_ = std::move(o.fields_);
    size_ = std::exchange(o.size_, 0);
    may_hold_long_ = std::exchange(o.may_hold_long_, false);
    o.fields_.clear();
  }
  return *this;
}

void HeaderMap::drop_long_strings(std::size_t from, std::size_t to) noexcept {
  for (std::size_t i = from; i < to; ++i) {
    Header& h = fields_[i];
    if (h.name.capacity() > kSpareBytes) std::string().swap(h.name);
    if (h.value.capacity() > kSpareBytes) std::string().swap(h.value);
  }
}

void HeaderMap::clear() noexcept {
  if (may_hold_long_) drop_long_strings(0, size_);  // (remove_if checked the spares it made)
  may_hold_long_ = false;
  size_ = 0;
}

void HeaderMap::set(std::string_view name, std::string value) {
  remove(name);
  add(std::string(name), std::move(value));
}

std::size_t HeaderMap::remove(std::string_view name) {
  return remove_if([&](const Header& h) { return iequals(h.name, name); });
}

const std::string* HeaderMap::get(std::string_view name) const {
  for (const auto& h : *this) {
    if (iequals(h.name, name)) return &h.value;
  }
  return nullptr;
}

std::size_t HeaderMap::count(std::string_view name) const {
  return static_cast<std::size_t>(
      std::count_if(begin(), end(), [&](const Header& h) { return iequals(h.name, name); }));
}

std::string HeaderMap::joined(std::string_view name) const {
  std::string out;
  for (const auto& h : *this) {
    if (!iequals(h.name, name)) continue;
    if (!out.empty()) out += ", ";
    out += h.value;
  }
  return out;
}

bool HeaderMap::has_token(std::string_view name, std::string_view token) const {
  for (const auto& h : *this) {
    if (iequals(h.name, name) && list_has_token(h.value, token)) return true;
  }
  return false;
}

}  // namespace sg::http
