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

// Under ThreadSanitizer an indefinite wait is given a timeout that never elapses (68 years).
// ThreadSanitizer defers a signal handler to the thread's next interception point, and the
// kernel gives a process's signal to its main thread, usually parked here in block_on(): an
// untimed FUTEX_WAIT is restarted after the handler (SA_RESTART), so the thread never reaches
// one and the handler never runs (the example server ignored SIGTERM under the tsan preset). A
// timed wait ends with EINTR instead, and the caller's next atomic load runs the handler.
// Elsewhere the kernel runs the handler itself, and a timed wait would only cost a timer per
// park. Test: HttpServer.* under the tsan preset, which stop the server with a signal.
#if defined(__SANITIZE_THREAD__)
constexpr bool kTimedForSignals = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kTimedForSignals = true;
#else
constexpr bool kTimedForSignals = false;
#endif
#else
constexpr bool kTimedForSignals = false;
#endif
constexpr std::int64_t kIndefinite = std::int64_t{INT_MAX} * 1'000'000'000;

}  // namespace

bool futex_wait(FutexWord& word, std::uint32_t expected,
                std::optional<std::chrono::nanoseconds> timeout) noexcept {
  // FUTEX_WAIT takes a relative CLOCK_MONOTONIC timeout.
  const timespec ts = to_timespec<timespec>(timeout ? timeout->count() : kIndefinite);
  long rc = futex(word, FUTEX_WAIT_PRIVATE, expected, timeout || kTimedForSignals ? &ts : nullptr);
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
