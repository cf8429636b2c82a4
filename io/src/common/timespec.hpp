// Nanoseconds to the timespec shapes the kernel waits take (timespec, __kernel_timespec).
#pragma once

#include <cstdint>

namespace arbor::io {

/// `ns` (>= 0) as a timespec-like struct with tv_sec and tv_nsec.
template <class Timespec>
Timespec to_timespec(std::int64_t ns) noexcept {
  Timespec ts{};
  if (ns < 0) return ts;
  ts.tv_sec = static_cast<decltype(ts.tv_sec)>(ns / 1'000'000'000);
  ts.tv_nsec = static_cast<decltype(ts.tv_nsec)>(ns % 1'000'000'000);
  return ts;
}

}  // namespace arbor::io
