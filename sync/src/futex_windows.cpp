// Windows backend: WaitOnAddress / WakeByAddress* (Windows 8+, link Synchronization.lib).
#ifndef _WIN32_WINNT
#define _WIN32_WINNT 0x0602  // WaitOnAddress is declared from Windows 8 on
#endif
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>

#include "arbor/sync/futex.hpp"

namespace arbor::sync {

// WaitOnAddress compares `sizeof expected` bytes at the address: the word must be exactly the
// 32-bit value with nothing else in the atomic.
static_assert(sizeof(FutexWord) == sizeof(std::uint32_t) && FutexWord::is_always_lock_free);

bool futex_wait(FutexWord& word, std::uint32_t expected,
                std::optional<std::chrono::nanoseconds> timeout) noexcept {
  DWORD ms = INFINITE;
  if (timeout) {
    auto count = std::chrono::ceil<std::chrono::milliseconds>(*timeout).count();
    ms = count <= 0 ? 0 : (count >= INFINITE ? INFINITE - 1 : static_cast<DWORD>(count));
  }
  if (WaitOnAddress(reinterpret_cast<volatile VOID*>(&word), &expected, sizeof expected, ms))
    return true;
  return GetLastError() != ERROR_TIMEOUT;
}

void futex_wake_one(FutexWord& word) noexcept {
  WakeByAddressSingle(&word);
}

void futex_wake_all(FutexWord& word) noexcept {
  WakeByAddressAll(&word);
}

const char* futex_backend() noexcept {
  return "WaitOnAddress";
}

}  // namespace arbor::sync
