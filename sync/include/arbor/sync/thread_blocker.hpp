// ThreadBlocker: one thread parks on it, any thread can unpark it.
//
// A binary signal on a futex word with three states:
//   kEmpty     no signal, owner not asleep
//   kSleeping  the owner is (about to be) blocked in futex_wait
//   kSignalled a wake arrived and has not been consumed
// `wake()` only makes a system call when it replaces kSleeping, so waking a thread that has not
// gone to sleep yet costs one atomic exchange. Only the owning thread calls `wait`; a wake
// that arrives before the wait is kept and consumed by it. Spurious futex returns are absorbed
// here: `wait()` returns only after a `wake()`. There is no timed wait: every user (the
// semaphore's parked threads, the benchmarks' main threads) waits until it is woken.
#pragma once

#include <cstdint>

#include "arbor/sync/futex.hpp"

namespace arbor::sync {

class ThreadBlocker {
 public:
  ThreadBlocker() = default;
  ThreadBlocker(const ThreadBlocker&) = delete;
  ThreadBlocker& operator=(const ThreadBlocker&) = delete;

  /// Blocks until woken, then consumes the signal.
  void wait() noexcept;
  /// Signals the owner. Several wakes before one wait count as one.
  void wake() noexcept;

 private:
  static constexpr std::uint32_t kEmpty = 0;
  static constexpr std::uint32_t kSleeping = 1;
  static constexpr std::uint32_t kSignalled = 2;
  FutexWord state_{kEmpty};
};

}  // namespace arbor::sync
