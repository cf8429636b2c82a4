// Linux futex backend: private futexes on the 32-bit word.
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
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
  // FUTEX_WAIT takes a relative CLOCK_MONOTONIC timeout. An indefinite wait is given one that
  // never elapses (68 years) because a timed wait ends with EINTR after a signal handler runs,
  // where an untimed one is restarted (SA_RESTART). That spurious return is what lets
  // ThreadSanitizer run a handler at all: it defers handlers to its next interception point
  // (our caller's atomic load), and the kernel gives a process's signal to its main thread,
  // usually parked here in block_on(). Test: HttpServer.* under the tsan preset, which stop the
  // server with a signal.
  constexpr std::int64_t kNever = std::int64_t{INT_MAX} * 1'000'000'000;
  const timespec ts = to_timespec<timespec>(timeout ? timeout->count() : kNever);
  long rc = futex(word, FUTEX_WAIT_PRIVATE, expected, &ts);
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
