#include "http/headers.h"

#include <algorithm>

namespace sg::http {

namespace {
char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + ('a' - 'A')) : c; }
}  // namespace

bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
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
