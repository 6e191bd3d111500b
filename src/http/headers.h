// Header fields of an HTTP/1.x message: an ordered list (same-name lines are never
// reordered, RFC 9110 §5.3) with case-insensitive lookup, and helpers for comma-separated
// list values.
#pragma once

#include <algorithm>
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

  HeaderMap() = default;
  HeaderMap(const HeaderMap& o) : fields_(o.begin(), o.end()), size_(o.size_), may_hold_long_(o.may_hold_long_) {}
  HeaderMap(HeaderMap&& o) noexcept
      : fields_(std::move(o.fields_)),
        size_(std::exchange(o.size_, 0)),
        may_hold_long_(std::exchange(o.may_hold_long_, false)) {}
  HeaderMap& operator=(const HeaderMap& o);
  HeaderMap& operator=(HeaderMap&& o) noexcept;

  void add(std::string name, std::string value) {
    Header& h = next_slot();
    h.name = std::move(name);
    h.value = std::move(value);
    note_length(h);
  }
  // Copies into a field line that clear() kept, reusing its strings' capacity: a parser's
  // maps live as long as the parser (which is recycled), so a request's fields cost no
  // allocation once an earlier message had as many fields as long.
  void add_copy(std::string_view name, std::string_view value) {
    Header& h = next_slot();
    h.name.assign(name);
    h.value.assign(value);
    note_length(h);
  }
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

  std::size_t size() const { return size_; }
  // Field lines held, spare ones included (what the map costs while it waits).
  std::size_t capacity() const { return fields_.capacity(); }
  bool empty() const { return size_ == 0; }
  // Empties the map; the field lines stay as spares unless a string grew past
  // kSpareBytes (a long cookie is not kept for every later message).
  void clear() noexcept;
  const_iterator begin() const { return fields_.begin(); }
  const_iterator end() const { return fields_.begin() + static_cast<std::ptrdiff_t>(size_); }
  template <class Pred>
  std::size_t remove_if(Pred&& p);

  static constexpr std::size_t kSpareBytes = 256;

 private:
  void drop_long_strings(std::size_t from, std::size_t to) noexcept;
  void note_length(const Header& h) {
    may_hold_long_ |= h.name.capacity() > kSpareBytes || h.value.capacity() > kSpareBytes;
  }
  Header& next_slot() {
    if (size_ == fields_.size()) fields_.emplace_back();
    return fields_[size_++];
  }

  // [0, size_) are the map's lines; the rest are spares whose strings keep their capacity
  // (at most kSpareBytes each).
  std::vector<Header> fields_;
  std::size_t size_ = 0;
  bool may_hold_long_ = false;  // a string over kSpareBytes was stored since the last clear()
};

template <class Pred>
std::size_t HeaderMap::remove_if(Pred&& p) {
  const auto live_end = fields_.begin() + static_cast<std::ptrdiff_t>(size_);
  // The removed lines end up after the kept ones, moved from: spares.
  const auto kept_end = std::remove_if(fields_.begin(), live_end, [&](const Header& h) { return p(h); });
  const auto removed = static_cast<std::size_t>(live_end - kept_end);
  drop_long_strings(size_ - removed, size_);  // a moved-from string may hold a kept one's buffer
  size_ -= removed;
  return removed;
}

}  // namespace sg::http
