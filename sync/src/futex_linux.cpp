// Linux futex backend: private futexes on the 32-bit word.
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>

#include "arbor/sync/futex.hpp"
#include "arbor/sync/timespec.hpp"

namespace arbor::sync {
namespace {

long futex(FutexWord& word, int op, std::uint32_t value, const timespec* timeout) noexcept {
  static_assert(sizeof(FutexWord) == sizeof(std::uint32_t) && FutexWord::is_always_lock_free);
  return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), op, value, timeout, nullptr,
                 0);
}

}  // namespace

bool futex_wait(FutexWord& word, std::uint32_t expected,
                std::optional<std::chrono::nanoseconds> timeout) noexcept {
  // FUTEX_WAIT takes a relative CLOCK_MONOTONIC timeout.
  const timespec ts = to_timespec<timespec>(timeout ? timeout->count() : 0);
  long rc = futex(word, FUTEX_WAIT_PRIVATE, expected, timeout ? &ts : nullptr);
  return !(rc == -1 && errno == ETIMEDOUT);  // EAGAIN (value changed) and EINTR are not timeouts
}

void futex_wake_one(FutexWord& word) noexcept {
  futex(word, FUTEX_WAKE_PRIVATE, 1, nullptr);
}

void futex_wake_all(FutexWord& word) noexcept {
  futex(word, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr);
}

const char* futex_backend() noexcept {
  return "futex";
}

}  // namespace arbor::sync
