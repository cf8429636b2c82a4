// CycleClock: a cheap monotonic tick counter for decisions that run per item.
//
// steady_clock::now() costs ~20 ns through the vDSO; the x86 TSC (constant and synchronised
// across cores on every CPU this targets) costs a few. Ticks are only compared with each other
// and with a threshold converted once by ticks_per_microsecond(); no absolute time is derived.
// Elsewhere the steady clock in nanoseconds is used.
#pragma once

#include <chrono>
#include <cstdint>

#if defined(_MSC_VER) && defined(_M_X64)
#include <intrin.h>  // MSVC declares __rdtsc here and has no <x86intrin.h>
#elif defined(__x86_64__)
#include <x86intrin.h>  // GCC and Clang, MinGW included
#endif

namespace arbor::sched::detail {

inline std::uint64_t cycle_ticks() noexcept {
#if defined(__x86_64__) || defined(_M_X64)
  return __rdtsc();
#else
  return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}

/// Measured once per process (about 200 µs of calibration on x86).
inline std::uint64_t ticks_per_microsecond() noexcept {
  static const std::uint64_t value = [] {
#if defined(__x86_64__) || defined(_M_X64)
    const auto t0 = std::chrono::steady_clock::now();
    const std::uint64_t c0 = cycle_ticks();
    auto t1 = t0;
    while (t1 - t0 < std::chrono::microseconds(200))
      t1 = std::chrono::steady_clock::now();
    const std::uint64_t c1 = cycle_ticks();
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count();
    const std::uint64_t per_us = (c1 - c0) / static_cast<std::uint64_t>(us > 0 ? us : 1);
    return per_us > 0 ? per_us : 1;
#else
    return std::uint64_t{1000} * std::chrono::steady_clock::period::den /
           std::chrono::steady_clock::period::num / 1'000'000'000;
#endif
  }();
  return value;
}

}  // namespace arbor::sched::detail
