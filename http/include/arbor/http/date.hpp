// The Date header's value (IMF-fixdate, e.g. "Sun, 06 Nov 1994 08:49:37 GMT").
//
// Formatting a date per response would cost more than the rest of a plaintext response; the
// value changes once a second. Each thread keeps its own copy and reformats it only when the
// second changes (one coarse clock read per call; no locks, no sharing).
#pragma once

#include <string_view>

namespace arbor::http {

inline constexpr std::size_t kDateSize = 29;

/// The current date, from this thread's cache. Valid until this thread's next call.
std::string_view http_date() noexcept;

/// Formats `unix_seconds` as an IMF-fixdate into out (kDateSize bytes).
void format_http_date(long long unix_seconds, char* out) noexcept;

}  // namespace arbor::http
