// Header fields of an HTTP/1.x message: an ordered list (same-name lines are never
// reordered, RFC 9110 §5.3) with case-insensitive lookup, and helpers for comma-separated
// list values.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sg::http {

bool iequals(std::string_view a, std::string_view b) noexcept;
std::string to_lower(std::string_view s);
std::string_view trim_ows(std::string_view s) noexcept;

// Calls f(token) for each element of a comma-separated list (RFC 9110 §5.6.1), with
// surrounding whitespace trimmed and empty elements skipped. f returns false to stop.
template <class F>
void for_each_list_item(std::string_view list, F&& f) {
  while (!list.empty()) {
    std::size_t comma = list.find(',');
    std::string_view item = trim_ows(list.substr(0, comma));
    if (!item.empty() && !f(item)) return;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

// True if the comma-separated list contains `token` (case-insensitive).
bool list_has_token(std::string_view list, std::string_view token) noexcept;

struct Header {
  std::string name;
  std::string value;
};

class HeaderMap {
 public:
  using const_iterator = std::vector<Header>::const_iterator;

  void add(std::string name, std::string value) { fields_.push_back({std::move(name), std::move(value)}); }
  // Copies: the parser keeps its scratch strings (and their capacity) for the next field.
  void add_copy(std::string_view name, std::string_view value) { fields_.emplace_back(Header{std::string(name), std::string(value)}); }
  // Replaces every line named `name` with one line.
  void set(std::string_view name, std::string value);
  // Removes every line named `name`; returns how many.
  std::size_t remove(std::string_view name);
  // First value, or nullptr.
  const std::string* get(std::string_view name) const;
  std::size_t count(std::string_view name) const;
  bool contains(std::string_view name) const { return get(name) != nullptr; }
  // All values of `name` joined with ", " (list semantics).
  std::string joined(std::string_view name) const;
  // True if any line of `name` lists `token`.
  bool has_token(std::string_view name, std::string_view token) const;

  std::size_t size() const { return fields_.size(); }
  std::size_t capacity() const { return fields_.capacity(); }
  bool empty() const { return fields_.empty(); }
  void clear() { fields_.clear(); }
  const_iterator begin() const { return fields_.begin(); }
  const_iterator end() const { return fields_.end(); }
  template <class Pred>
  std::size_t remove_if(Pred&& p);

 private:
  std::vector<Header> fields_;
};

template <class Pred>
std::size_t HeaderMap::remove_if(Pred&& p) {
  std::size_t before = fields_.size();
  std::erase_if(fields_, [&](const Header& h) { return p(h); });
  return before - fields_.size();
}

}  // namespace sg::http
