// Routes the unqualified futex functions to the mutex + condvar fallback (ARBOR_FUTEX=fallback,
// or a platform without a native compare-and-wait primitive).
#include "arbor/sync/futex.hpp"

namespace arbor::sync {

bool futex_wait(FutexWord& word, std::uint32_t expected,
                std::optional<std::chrono::nanoseconds> timeout) noexcept {
  return fallback::futex_wait(word, expected, timeout);
}
void futex_wake_one(FutexWord& word) noexcept {
  fallback::futex_wake_one(word);
}
void futex_wake_all(FutexWord& word) noexcept {
  fallback::futex_wake_all(word);
}
const char* futex_backend() noexcept {
  return "fallback";
}

}  // namespace arbor::sync
