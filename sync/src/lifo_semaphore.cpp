#include "arbor/sync/lifo_semaphore.hpp"

#include <cassert>
#include <thread>

#include "arbor/sync/thread_blocker.hpp"

namespace arbor::sync {
namespace {

using Counts = LifoSemaphore::Counts;

// Layout of the state word: signals in bits 0..31, waiters 32..47, signaled_to_wake 48..63
// (never more than waiters, so it cannot overflow).
constexpr std::uint64_t pack(Counts c) noexcept {
  return std::uint64_t{c.signals} | std::uint64_t{c.waiters} << 32 |
         std::uint64_t{c.signaled_to_wake} << 48;
}
constexpr Counts unpack(std::uint64_t s) noexcept {
  return Counts{static_cast<std::uint32_t>(s), static_cast<std::uint16_t>(s >> 32),
                static_cast<std::uint16_t>(s >> 48)};
}
constexpr std::uint32_t add_signals(std::uint32_t signals, std::uint32_t n) noexcept {
  return n >= LifoSemaphore::kMaxSignals - signals ? LifoSemaphore::kMaxSignals : signals + n;
}

// Each thread parks on its own blocker, which outlives every semaphore wait of that thread.
ThreadBlocker& this_thread_blocker() noexcept {
  thread_local ThreadBlocker blocker;
  return blocker;
}

}  // namespace

// A waiter only ever leaves the stack from the top (a release choosing it), so one link is
// enough. Once popped, `below` links release()'s private list of waiters to wake.
struct LifoSemaphore::Waiter {
  ThreadBlocker* blocker;
  Waiter* below = nullptr;
  // Set by nudge() under the mutex while we are off the stack and chosen; read by us after our
  // blocker's wake (its release/acquire orders the write before the read), cleared by us under
  // the mutex before we re-push, so nobody writes it concurrently.
  bool nudged = false;
};

LifoSemaphore::LifoSemaphore(std::uint32_t initial_signals) noexcept
    : state_(pack(Counts{initial_signals, 0, 0})) {}

Counts LifoSemaphore::counts() const noexcept {
  return unpack(state_.load(std::memory_order_relaxed));
}

// Acquire on success: the releaser's writes before release() happen-before our return.
bool LifoSemaphore::try_wait() noexcept {
  std::uint64_t s = state_.load(std::memory_order_relaxed);
  for (;;) {
    Counts c = unpack(s);
    if (c.signals == 0) return false;
    --c.signals;
    if (state_.compare_exchange_weak(s, pack(c), std::memory_order_acquire,
                                     std::memory_order_relaxed))
      return true;
  }
}

void LifoSemaphore::wait() noexcept {
  if (try_wait()) return;
  Waiter self{&this_thread_blocker()};
  {
    // Take a signal that arrived meanwhile, or register and push in one critical section.
    std::lock_guard lock(stack_mutex_);
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    for (;;) {
      Counts c = unpack(s);
      const bool take = c.signals > 0;
      if (take) {
        --c.signals;
      } else {
        ++c.waiters;
      }
      if (state_.compare_exchange_weak(s, pack(c), std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
        if (take) return;
        break;
      }
    }
    self.below = top_;
    top_ = &self;
  }

  for (;;) {
    self.blocker->wait();
    // Nudged: through the kernel once more before we count as back. Our wait() above may have
    // returned without a system call (the wake came before we slept); a yield is one, and the
    // return from it runs whatever the kernel queued for this thread (see the top of the file).
    if (self.nudged) std::this_thread::yield();
    // We were chosen by a release: stop counting as chosen, then take a signal if one is still
    // there (another thread's try_wait() may have taken it meanwhile) or park again, still a
    // waiter.
    std::lock_guard lock(stack_mutex_);
    if (self.nudged) {
      self.nudged = false;
      --nudged_out_;
    }
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    for (;;) {
      Counts c = unpack(s);
      assert(c.signaled_to_wake > 0 && c.waiters > 0);
      --c.signaled_to_wake;
      const bool take = c.signals > 0;
      if (take) {
        --c.signals;
        --c.waiters;
      }
      if (state_.compare_exchange_weak(s, pack(c), std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
        if (take) return;
        break;
      }
    }
    self.below = top_;
    top_ = &self;
  }
}

void LifoSemaphore::release(std::uint32_t n) noexcept {
  if (n == 0) return;
  // Fast path: nobody parked, so there is nobody to choose; just add the signals. A waiter
  // registering concurrently changes the word, which fails this CAS and sends us to the slow
  // path. Release ordering publishes our prior writes to whoever takes the signal.
  std::uint64_t s = state_.load(std::memory_order_relaxed);
  for (;;) {
    Counts c = unpack(s);
    if (c.waiters != 0) break;
    c.signals = add_signals(c.signals, n);
    if (state_.compare_exchange_weak(s, pack(c), std::memory_order_release,
                                     std::memory_order_relaxed))
      return;
  }

  Waiter* to_wake = nullptr;  // most recently parked first, linked through `below`
  {
    std::lock_guard lock(stack_mutex_);
    s = state_.load(std::memory_order_relaxed);
    std::uint32_t wake = 0;
    for (;;) {
      Counts c = unpack(s);
      c.signals = add_signals(c.signals, n);
      const std::uint32_t waiters = c.waiters, chosen = c.signaled_to_wake;
      const std::uint32_t wanted = c.signals < waiters ? c.signals : waiters;
      wake = wanted > chosen ? wanted - chosen : 0;
      c.signaled_to_wake = static_cast<std::uint16_t>(c.signaled_to_wake + wake);
      if (state_.compare_exchange_weak(s, pack(c), std::memory_order_release,
                                       std::memory_order_relaxed))
        break;
    }
    // The chosen waiters are the top `wake` entries, already linked in waking order: cut them
    // off the stack as one list.
    if (wake > 0) {
      to_wake = top_;
      Waiter* last = top_;
      for (std::uint32_t i = 1; i < wake; ++i) {
        assert(last != nullptr && "stack holds waiters - signaled_to_wake threads");
        last = last->below;
      }
      assert(last != nullptr && "stack holds waiters - signaled_to_wake threads");
      top_ = last->below;
      last->below = nullptr;
    }
  }
  // Outside the lock: a chosen waiter cannot leave wait() (nor re-push itself) before its
  // blocker is woken, so each record stays valid until we have read its `below` and woken it.
  while (to_wake != nullptr) {
    Waiter* w = to_wake;
    to_wake = w->below;
    w->blocker->wake();
  }
}

bool LifoSemaphore::nudge(std::uint32_t expected) noexcept {
  Waiter* to_wake = nullptr;
  {
    std::lock_guard lock(stack_mutex_);
    if (nudged_out_ != 0) return false;
    // Choose them all, as a release of `waiters` signals would, but add no signal: each finds
    // none for itself (unless a release adds one meanwhile, which the waiter takes: a release
    // counts chosen waiters as the ones to take its signals, so it wakes nobody more).
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    for (;;) {
      Counts c = unpack(s);
      if (c.waiters != expected || c.signaled_to_wake != 0) return false;
      c.signaled_to_wake = c.waiters;
      if (state_.compare_exchange_weak(s, pack(c), std::memory_order_relaxed,
                                       std::memory_order_relaxed))
        break;
    }
    // The whole stack: it holds waiters - signaled_to_wake threads, all of them now.
    to_wake = top_;
    top_ = nullptr;
    for (Waiter* w = to_wake; w != nullptr; w = w->below) {
      w->nudged = true;
      ++nudged_out_;
    }
  }
  // Outside the lock, as release() does (its comment says why the records stay valid).
  while (to_wake != nullptr) {
    Waiter* w = to_wake;
    to_wake = w->below;
    w->blocker->wake();
  }
  return true;
}

bool LifoSemaphore::nudged() noexcept {
  // Under the mutex: a waiter's decrement comes after its system call, so what the kernel did
  // for it on the way back (a CQE posted) happens-before our return.
  std::lock_guard lock(stack_mutex_);
  return nudged_out_ == 0;
}

}  // namespace arbor::sync
