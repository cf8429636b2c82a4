// macOS backend: the __ulock_* compare-and-wait calls that libc++ and the Swift runtime use.
#include <cerrno>
#include <cstdint>

#include "arbor/sync/futex.hpp"

extern "C" int __ulock_wait(std::uint32_t operation, void* addr, std::uint64_t value,
                            std::uint32_t timeout_us);
extern "C" int __ulock_wake(std::uint32_t operation, void* addr, std::uint64_t wake_value);

namespace arbor::sync {
namespace {
constexpr std::uint32_t kCompareAndWait = 1;   // UL_COMPARE_AND_WAIT
constexpr std::uint32_t kWakeAll = 0x100;      // ULF_WAKE_ALL
constexpr std::uint32_t kNoErrno = 0x1000000;  // ULF_NO_ERRNO
}  // namespace

bool futex_wait(FutexWord& word, std::uint32_t expected,
                std::optional<std::chrono::nanoseconds> timeout) noexcept {
  std::uint32_t us = 0;  // 0 means forever
  if (timeout) {
    auto count = std::chrono::ceil<std::chrono::microseconds>(*timeout).count();
    us = count <= 0 ? 1 : (count > UINT32_MAX ? UINT32_MAX : static_cast<std::uint32_t>(count));
  }
  int rc = __ulock_wait(kCompareAndWait | kNoErrno, &word, expected, us);
  return !(rc == -ETIMEDOUT);
}

void futex_wake_one(FutexWord& word) noexcept {
  __ulock_wake(kCompareAndWait | kNoErrno, &word, 0);
}

void futex_wake_all(FutexWord& word) noexcept {
  __ulock_wake(kCompareAndWait | kWakeAll | kNoErrno, &word, 0);
}

const char* futex_backend() noexcept {
  return "ulock";
}

}  // namespace arbor::sync
