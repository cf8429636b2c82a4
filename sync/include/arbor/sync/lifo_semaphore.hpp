// LifoSemaphore: a counting semaphore that wakes the most recently parked waiter first.
//
// Why LIFO: a thread that parked a moment ago still has a warm cache and may not even be fully
// asleep yet; the one parked longest is cold. Waking LIFO also lets surplus threads stay parked,
// which keeps their cores free for everything else.
//
// There is no timed wait and no spinning inside wait(): the scheduler, the only user, spins on
// its own queues (sync/spin.hpp) before it parks here, and never gives up on a park.
//
// The counts live in one 64-bit word changed only by compare-and-swap:
//   signals            releases not yet consumed
//   waiters            threads registered as parked (including those signalled to wake)
//   signaled_to_wake   waiters a release has already chosen to wake, not yet running
// A release wakes min(signals, waiters) - signaled_to_wake waiters: waiters already chosen will
// take signals themselves and must not be chosen twice. A chosen waiter can find its signal
// gone (a try_wait(), or a wait() just arriving, took it first); it then parks again, still
// counted as a waiter.
//
// The parked threads themselves sit on an intrusive stack guarded by a small mutex. The mutex
// is taken only on the slow paths (registering a waiter, a woken waiter's re-check, a release
// while someone is parked) — never by try_wait() nor by a release that finds no waiters — and
// it keeps one invariant: while it is held, the stack holds exactly `waiters - signaled_to_wake`
// threads. Registration (waiters++ and push) and selection (signaled_to_wake++ and pop) each
// happen in one critical section, so a release can never count a waiter it cannot find: no
// lost wakeups. Wakes are delivered after the mutex is dropped, through each waiter's
// ThreadBlocker.
//
// nudge() is for a paused test clock only (arbor::io::TimerPlan): it chooses every parked
// waiter as a release would, but adds no signal, so each wakes, finds no signal of its own and
// parks again — the "chosen waiter finds its signal gone" case above, so the counts and the
// invariant are those of a release. What it adds is a promise about the kernel: a nudged waiter
// makes a system call (its futex wait returns, and it yields once more in case the wake found
// it not yet asleep) before it counts as back, under the mutex, and nudged() says when all are
// back. On Linux a thread runs its pending task work (io_uring's completion work for requests
// it submitted) on every return from the kernel, so once nudged() says yes, that work is done.
// Outside a nudge a waiter reads one flag of its own record; nothing shared is written.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

namespace arbor::sync {

class LifoSemaphore {
 public:
  struct Counts {
    std::uint32_t signals = 0;  // at most kMaxSignals
    std::uint16_t waiters = 0;
    std::uint16_t signaled_to_wake = 0;
  };
  /// Signals beyond this saturate; releases this large mean a logic error in the caller.
  static constexpr std::uint32_t kMaxSignals = UINT32_MAX;

  explicit LifoSemaphore(std::uint32_t initial_signals = 0) noexcept;
  LifoSemaphore(const LifoSemaphore&) = delete;
  LifoSemaphore& operator=(const LifoSemaphore&) = delete;
  ~LifoSemaphore() = default;

  /// Takes a signal if one is available without blocking.
  bool try_wait() noexcept;
  /// Takes a signal, parking until a release provides one.
  void wait() noexcept;
  /// Adds `n` signals and wakes up to `n` parked waiters, most recently parked first.
  void release(std::uint32_t n = 1) noexcept;

  /// A racy snapshot of the counts, for tests and metrics.
  Counts counts() const noexcept;

  /// Wakes every parked waiter once without giving it a signal, if exactly `expected` threads
  /// are parked, none of them chosen yet, and no earlier nudge is outstanding; false (nobody
  /// woken) otherwise. Each goes through the kernel and parks again, or takes a signal a
  /// release made meanwhile. For a paused test clock; see the top of this file.
  bool nudge(std::uint32_t expected) noexcept;
  /// True once every waiter the last nudge() woke has been through the kernel since and is
  /// parked again or has returned from wait().
  bool nudged() noexcept;

 private:
  struct Waiter;

  std::atomic<std::uint64_t> state_;
  std::mutex stack_mutex_;
  Waiter* top_ = nullptr;         // guarded by stack_mutex_
  std::uint32_t nudged_out_ = 0;  // nudged waiters not back yet; guarded by stack_mutex_
};

}  // namespace arbor::sync
