// Result<T>: a value or a std::error_code. Errors on the data path are values (no
// exceptions); this is the return type of fallible operations there.
#pragma once

#include <cassert>
#include <system_error>
#include <utility>
#include <variant>

namespace sg {

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(std::error_code ec) : v_(ec) { assert(ec); }  // NOLINT(google-explicit-constructor)
  Result(std::errc e) : v_(std::make_error_code(e)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }
  std::error_code error() const noexcept { return ok() ? std::error_code{} : std::get<1>(v_); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, std::error_code> v_;
};

}  // namespace sg
