// Futex word: the one compare-and-wait primitive everything in arbor parks on.
//
// `futex_wait(word, expected)` blocks the calling thread while `word == expected`, until a
// `futex_wake_*` on the same word, the timeout, or a spurious wakeup. Callers therefore always
// re-check their condition in a loop; the primitive only saves them from burning a core.
//
// Backends, chosen at build time (CMake `ARBOR_FUTEX`):
//   Linux   futex(FUTEX_WAIT_PRIVATE / FUTEX_WAKE_PRIVATE)
//   Windows WaitOnAddress / WakeByAddressSingle / WakeByAddressAll
//   macOS   __ulock_wait / __ulock_wake
//   other   `fallback::` — a fixed table of mutex + condition-variable buckets.
// The fallback is compiled on every platform so that its tests run everywhere; the
// `fallback` setting of ARBOR_FUTEX makes it the backend behind the unqualified functions.
//
// Synchronisation comes from the atomic word itself (the waker stores, then wakes; the waiter
// loads). The wait/wake calls order nothing; they only block and unblock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

namespace arbor::sync {

using FutexWord = std::atomic<std::uint32_t>;

/// Blocks while `word == expected`. Returns false only when `timeout` elapsed; true for a
/// wake, a value mismatch or a spurious return. No timeout means wait indefinitely.
bool futex_wait(FutexWord& word, std::uint32_t expected,
                std::optional<std::chrono::nanoseconds> timeout = std::nullopt) noexcept;
/// Wakes at most one thread blocked on `word`.
void futex_wake_one(FutexWord& word) noexcept;
/// Wakes every thread blocked on `word`.
void futex_wake_all(FutexWord& word) noexcept;

/// Name of the backend behind the functions above ("futex", "WaitOnAddress", "ulock", "fallback").
const char* futex_backend() noexcept;

namespace fallback {
bool futex_wait(FutexWord& word, std::uint32_t expected,
                std::optional<std::chrono::nanoseconds> timeout = std::nullopt) noexcept;
void futex_wake_one(FutexWord& word) noexcept;
void futex_wake_all(FutexWord& word) noexcept;
}  // namespace fallback

}  // namespace arbor::sync
