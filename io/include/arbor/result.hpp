// Result<T>: a value or a std::error_code, the return type of every IO operation.
//
// The IO path never throws: failures are values the caller must look at. Result is a small
// value type (no allocation); `value()` on an error is a programming mistake and terminates
// via assert in debug builds and std::terminate otherwise, rather than throwing.
#pragma once

#include <cassert>
#include <exception>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

namespace arbor {

template <class T>
class [[nodiscard]] Result {
 public:
  using value_type = T;

  Result(T value) : state_(std::in_place_index<0>, std::move(value)) {}    // NOLINT: implicit
  Result(std::error_code error) : state_(std::in_place_index<1>, error) {  // NOLINT: implicit
    assert(error);
  }

  bool has_value() const noexcept { return state_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  /// The error, or an empty error_code when there is a value.
  std::error_code error() const noexcept {
    return has_value() ? std::error_code{} : std::get<1>(state_);
  }

  T& value() & noexcept { return checked(); }
  const T& value() const& noexcept { return const_cast<Result*>(this)->checked(); }
  T&& value() && noexcept { return std::move(checked()); }
  T& operator*() & noexcept { return checked(); }
  T&& operator*() && noexcept { return std::move(checked()); }
  T* operator->() noexcept { return &checked(); }
  const T* operator->() const noexcept { return &const_cast<Result*>(this)->checked(); }

 private:
  T& checked() noexcept {
    if (!has_value()) std::terminate();
    return std::get<0>(state_);
  }
  std::variant<T, std::error_code> state_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  using value_type = void;
  Result() = default;
  Result(std::error_code error) : error_(error) {}  // NOLINT: implicit
  bool has_value() const noexcept { return !error_; }
  explicit operator bool() const noexcept { return has_value(); }
  std::error_code error() const noexcept { return error_; }
  void value() const noexcept {
    if (error_) std::terminate();
  }

 private:
  std::error_code error_;
};

template <class T>
struct is_result : std::false_type {};
template <class T>
struct is_result<Result<T>> : std::true_type {};

/// The error category errno values belong to. On POSIX that is system_category(). On Windows
/// system_category() holds Windows error codes (GetLastError, WSAGetLastError: so in MSVC's
/// library and in libstdc++ for mingw-w64), where an errno value would be misread, and errno
/// values are generic_category()'s.
inline const std::error_category& errno_category() noexcept {
#if defined(_WIN32)
  return std::generic_category();
#else
  return std::system_category();
#endif
}

/// `-errno` style result (as kernels report, and as every engine reports on every platform)
/// to an error_code in errno_category().
inline std::error_code errno_code(int error) noexcept {
  return {error < 0 ? -error : error, errno_category()};
}

}  // namespace arbor
