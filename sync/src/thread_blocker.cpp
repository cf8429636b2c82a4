#include "arbor/sync/thread_blocker.hpp"

namespace arbor::sync {

// Orderings: wake() publishes with release (its exchange), the owner consumes with acquire, so
// whatever the waker wrote before wake() is visible to the owner after wait() returns.

void ThreadBlocker::wait() noexcept {
  std::uint32_t s = kEmpty;
  // Announce the sleep; if a signal is already there the CAS fails and we consume it below.
  if (state_.compare_exchange_strong(s, kSleeping, std::memory_order_acquire)) {
    do {
      futex_wait(state_, kSleeping);
    } while (state_.load(std::memory_order_acquire) == kSleeping);
  }
  // Only the owner moves the word away from kSignalled, so a plain store is enough.
  state_.store(kEmpty, std::memory_order_relaxed);
}

void ThreadBlocker::wake() noexcept {
  if (state_.exchange(kSignalled, std::memory_order_release) == kSleeping) futex_wake_one(state_);
}

}  // namespace arbor::sync
