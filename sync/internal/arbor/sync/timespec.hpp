// Nanoseconds to the timespec shapes kernel waits take (futex's timespec, epoll_pwait2's
// timespec, io_uring's __kernel_timespec): the one conversion every layer uses. Lives in sync,
// the lowest layer, so the futex backend and the engines share it. Not for users: it is in
// sync/internal, which is never installed, and the layers reach it through the build-only
// target arbor_sync_internal.
#pragma once

#include <cstdint>

namespace arbor::sync {

/// `ns` as a timespec-like struct with tv_sec and tv_nsec (a negative `ns` is zero).
template <class Timespec>
Timespec to_timespec(std::int64_t ns) noexcept {
  Timespec ts{};
  if (ns < 0) return ts;
  ts.tv_sec = static_cast<decltype(ts.tv_sec)>(ns / 1'000'000'000);
  ts.tv_nsec = static_cast<decltype(ts.tv_nsec)>(ns % 1'000'000'000);
  return ts;
}

}  // namespace arbor::sync
