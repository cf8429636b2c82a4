#include "arbor/sync/lifo_semaphore.hpp"

#include <cassert>

#include "arbor/sync/spin.hpp"
#include "arbor/sync/thread_blocker.hpp"

namespace arbor::sync {
namespace {

using Counts = LifoSemaphore::Counts;

// Layout of the state word: signals in bits 0..23, spinners 24..31, waiters 32..47,
// signaled_to_wake 48..63 (never more than waiters, so it cannot overflow).
constexpr std::uint64_t pack(Counts c) noexcept {
  return std::uint64_t{c.signals} | std::uint64_t{c.spinners} << 24 |
         std::uint64_t{c.waiters} << 32 | std::uint64_t{c.signaled_to_wake} << 48;
}
constexpr Counts unpack(std::uint64_t s) noexcept {
  return Counts{static_cast<std::uint32_t>(s & LifoSemaphore::kMaxSignals),
                static_cast<std::uint8_t>(s >> 24), static_cast<std::uint16_t>(s >> 32),
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

struct LifoSemaphore::Waiter {
  ThreadBlocker* blocker;
  Waiter* above = nullptr;  // towards top_
  Waiter* below = nullptr;
  Waiter* next_to_wake = nullptr;  // release()'s private list, filled under the mutex
  bool in_stack = false;
};

LifoSemaphore::LifoSemaphore(std::uint32_t initial_signals) noexcept
    : state_(pack(Counts{initial_signals, 0, 0, 0})) {}

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

bool LifoSemaphore::wait(std::optional<std::chrono::nanoseconds> timeout,
                         std::uint32_t spin_iterations) noexcept {
  if (try_wait()) return true;
  std::optional<std::chrono::steady_clock::time_point> deadline;
  if (timeout) deadline = std::chrono::steady_clock::now() + *timeout;

  bool spinning = false;
  if (spin_iterations > 0) {
    // Register as a spinner so that releases leave a signal for us instead of waking a waiter.
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    for (;;) {
      Counts c = unpack(s);
      if (c.signals > 0) {
        --c.signals;
        if (state_.compare_exchange_weak(s, pack(c), std::memory_order_acquire,
                                         std::memory_order_relaxed))
          return true;
        continue;
      }
      if (c.spinners == UINT8_MAX) break;  // enough spinners: go straight to parking
      ++c.spinners;
      if (state_.compare_exchange_weak(s, pack(c), std::memory_order_relaxed)) {
        spinning = true;
        break;
      }
    }
    for (std::uint32_t i = 0; spinning && i < spin_iterations; ++i) {
      cpu_relax();
      s = state_.load(std::memory_order_relaxed);
      Counts c = unpack(s);
      while (c.signals > 0) {
        --c.signals;
        --c.spinners;
        if (state_.compare_exchange_weak(s, pack(c), std::memory_order_acquire,
                                         std::memory_order_relaxed))
          return true;
        c = unpack(s);
      }
    }
  }
  return park(deadline, spinning);
}

bool LifoSemaphore::park(std::optional<std::chrono::steady_clock::time_point> deadline,
                         bool spinning) noexcept {
  Waiter self{&this_thread_blocker()};
  {
    std::lock_guard lock(stack_mutex_);
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    for (;;) {
      Counts c = unpack(s);
      if (spinning) --c.spinners;
      bool take = c.signals > 0;
      if (take) {
        --c.signals;
      } else {
        ++c.waiters;
      }
      if (state_.compare_exchange_weak(s, pack(c), std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
        if (take) return true;
        break;
      }
    }
    push(&self);
  }

  for (;;) {
    bool woken = true;
    if (deadline) {
      woken = self.blocker->wait_until(*deadline);
    } else {
      self.blocker->wait();
    }
    std::unique_lock lock(stack_mutex_);
    if (!woken) {
      if (self.in_stack) {
        // Timed out while still parked: leave quietly.
        unlink(&self);
        state_.fetch_sub(std::uint64_t{1} << 32, std::memory_order_relaxed);  // --waiters
        return false;
      }
      // A release popped us between the timeout and the lock; its wake is on the way and it
      // still needs our Waiter, so take the wake before deciding.
      lock.unlock();
      self.blocker->wait();
      lock.lock();
    }
    // We were chosen by a release: stop counting as chosen, then take a signal if one is still
    // there (a spinner may have taken it meanwhile) or park again.
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    bool expired = deadline && std::chrono::steady_clock::now() >= *deadline;
    for (;;) {
      Counts c = unpack(s);
      assert(c.signaled_to_wake > 0 && c.waiters > 0);
      --c.signaled_to_wake;
      bool take = c.signals > 0;
      if (take) --c.signals;
      if (take || expired) --c.waiters;
      if (state_.compare_exchange_weak(s, pack(c), std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
        if (take) return true;
        if (expired) return false;
        break;
      }
    }
    push(&self);
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

  Waiter* to_wake = nullptr;  // most recently parked first
  Waiter** tail = &to_wake;
  {
    std::lock_guard lock(stack_mutex_);
    s = state_.load(std::memory_order_relaxed);
    std::uint32_t wake = 0;
    for (;;) {
      Counts c = unpack(s);
      c.signals = add_signals(c.signals, n);
      std::uint32_t candidates = std::uint32_t{c.waiters} + c.spinners;
      std::uint32_t wanted = c.signals < candidates ? c.signals : candidates;
      std::uint32_t taken = std::uint32_t{c.spinners} + c.signaled_to_wake;
      wake = wanted > taken ? wanted - taken : 0;
      c.signaled_to_wake = static_cast<std::uint16_t>(c.signaled_to_wake + wake);
      if (state_.compare_exchange_weak(s, pack(c), std::memory_order_release,
                                       std::memory_order_relaxed))
        break;
    }
    for (std::uint32_t i = 0; i < wake; ++i) {
      Waiter* w = pop();
      assert(w != nullptr && "stack holds waiters - signaled_to_wake threads");
      w->next_to_wake = nullptr;
      *tail = w;
      tail = &w->next_to_wake;
    }
  }
  // Outside the lock: a chosen waiter cannot leave park() before its blocker is woken, so the
  // Waiter records stay valid until we read next_to_wake and wake them.
  while (to_wake != nullptr) {
    Waiter* w = to_wake;
    to_wake = w->next_to_wake;
    w->blocker->wake();
  }
}

void LifoSemaphore::push(Waiter* w) noexcept {
  w->below = top_;
  w->above = nullptr;
  if (top_ != nullptr) top_->above = w;
  top_ = w;
  w->in_stack = true;
}

LifoSemaphore::Waiter* LifoSemaphore::pop() noexcept {
  Waiter* w = top_;
  if (w != nullptr) unlink(w);
  return w;
}

void LifoSemaphore::unlink(Waiter* w) noexcept {
  if (w->above != nullptr) {
    w->above->below = w->below;
  } else {
    top_ = w->below;
  }
  if (w->below != nullptr) w->below->above = w->above;
  w->above = w->below = nullptr;
  w->in_stack = false;
}

}  // namespace arbor::sync
