// arbor's own error codes (everything else is a system error_code).
#pragma once

#include <system_error>

namespace arbor {

enum class Errc {
  end_of_stream = 1,  // read_exact: the peer closed before the buffer was full
  not_in_runtime,     // an operation that needs a runtime was awaited outside its tasks
};

const std::error_category& error_category() noexcept;
inline std::error_code make_error_code(Errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

}  // namespace arbor

template <>
struct std::is_error_code_enum<arbor::Errc> : std::true_type {};
