// Mutex: an async, FIFO-fair mutual exclusion lock that parks tasks, never threads.
//
//   arbor::Mutex m;
//   auto guard = co_await m.lock();          // Result<Mutex::Guard>
//   if (!guard) co_return guard.error();     // operation_canceled: the task was cancelled
//   ...                                      // unlocked when the guard goes
//
// Invariant: `state_` is 0 (unlocked), 1 (locked, nobody waiting) or 2 (locked, waiters
// queued); it is 2 exactly when the waiter list is non-empty, which is only changed with the
// spinlock held. The uncontended path is one compare-exchange to lock and one to unlock, with
// no other shared write (about 10-20 ns). Unlocking with waiters never releases the lock: it
// hands it to the first waiter (state stays locked), so a task arriving meanwhile cannot
// barge ahead of the queue: strict FIFO. That costs throughput under heavy contention (the
// woken task must be scheduled before anyone can use the lock) and buys no starvation.
//
// Cancellation: a waiter removed by its stop token completes with operation_canceled; if it was
// the last waiter the state drops back to 1. A waiter that had already been handed the lock
// when the cancellation arrived keeps it (its lock() succeeds).
//
// Ownership: the Guard owns the lock; moving it moves the ownership. Destroying a Mutex that is
// locked or has waiters is a precondition violation: with waiters it ends the process with a
// message (waiting tasks would otherwise dangle).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>

#include "arbor/result.hpp"
#include "arbor/runtime/waiter_list.hpp"

namespace arbor {

class Mutex {
 public:
  /// Owns the lock: unlocks when destroyed (or by unlock()).
  class [[nodiscard]] Guard {
   public:
    Guard(Guard&& other) noexcept : mutex_(std::exchange(other.mutex_, nullptr)) {}
    Guard& operator=(Guard&& other) noexcept {
      if (this != &other) {
        unlock();
        mutex_ = std::exchange(other.mutex_, nullptr);
      }
      return *this;
    }
    ~Guard() { unlock(); }
    /// Releases the lock early (the guard is empty afterwards).
    void unlock() noexcept {
      if (mutex_ != nullptr) std::exchange(mutex_, nullptr)->unlock();
    }
    Mutex* mutex() const noexcept { return mutex_; }

   private:
    friend class Mutex;
    explicit Guard(Mutex* m) noexcept : mutex_(m) {}
    Mutex* mutex_;
  };

  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  ~Mutex() {
    if (!waiters_.empty()) detail::destroyed_with_waiters("arbor::Mutex");
  }

  class [[nodiscard]] LockAwaiter : public detail::ParkingAwaiter<LockAwaiter> {
   public:
    explicit LockAwaiter(Mutex& m) noexcept : ParkingAwaiter(m.lock_, m.waiters_), mutex_(m) {}

    bool await_ready() noexcept { return mutex_.try_acquire(); }
    Result<Guard> await_resume() noexcept {
      if (auto e = finish()) return e;
      return Guard(&mutex_);
    }

    bool try_locked(detail::WakeList&) noexcept {
      // Either take the lock or make sure the holder's unlock takes the slow path (state 2).
      std::uint32_t s = mutex_.state_.load(std::memory_order_relaxed);
      for (;;) {
        if (s == kUnlocked) {
          if (mutex_.state_.compare_exchange_weak(s, kLocked, std::memory_order_acquire,
                                                  std::memory_order_relaxed))
            return true;
        } else if (s == kLocked) {
          // relaxed: the list it announces is guarded by the spinlock, which unlock() takes.
          if (mutex_.state_.compare_exchange_weak(s, kContended, std::memory_order_relaxed,
                                                  std::memory_order_relaxed))
            return false;
        } else {
          return false;
        }
      }
    }
    void remove_locked(detail::WakeList& wake) noexcept {
      ParkingAwaiter::remove_locked(wake);
      if (mutex_.waiters_.empty()) mutex_.state_.store(kLocked, std::memory_order_relaxed);
    }

   private:
    Mutex& mutex_;
  };

  /// `co_await m.lock()`: Result<Guard>; operation_canceled if the task is cancelled while it
  /// waits (a lock that is free is taken without looking at the token).
  LockAwaiter lock() noexcept { return LockAwaiter(*this); }

  /// The lock if it is free now and nobody waits, without waiting.
  std::optional<Guard> try_lock() noexcept {
    if (!try_acquire()) return std::nullopt;
    return Guard(this);
  }

  /// Whether the lock is held (racy: for assertions and tests).
  bool is_locked() const noexcept { return state_.load(std::memory_order_relaxed) != kUnlocked; }
  /// Tasks waiting for the lock (racy: for tests and metrics).
  std::size_t waiting() noexcept {
    std::lock_guard guard(lock_);
    return waiters_.size();
  }

 private:
  static constexpr std::uint32_t kUnlocked = 0, kLocked = 1, kContended = 2;

  bool try_acquire() noexcept {
    std::uint32_t expected = kUnlocked;
    // acquire: what the previous holder wrote before its release is visible in our section.
    return state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }

  void unlock() noexcept {
    std::uint32_t expected = kLocked;
    // release: publishes our critical section to the next fast-path locker.
    if (state_.compare_exchange_strong(expected, kUnlocked, std::memory_order_release,
                                       std::memory_order_relaxed))
      return;
    unlock_slow();
  }

  void unlock_slow() noexcept {
    detail::WakeList wake;
    lock_.lock();
    if (detail::Waiter* next = waiters_.pop_front()) {
      // Hand-off: the lock stays held, now by `next`. Its section is ordered after ours by the
      // spinlock and the scheduler queue it is resumed through.
      if (waiters_.empty()) state_.store(kLocked, std::memory_order_relaxed);
      wake.push(*next);
    } else {
      // The waiters that made the state 2 were cancelled or went elsewhere.
      state_.store(kUnlocked, std::memory_order_release);
    }
    lock_.unlock();
  }

  std::atomic<std::uint32_t> state_{kUnlocked};
  detail::SpinLock lock_;
  detail::WaiterList waiters_;  // guarded by lock_
};

}  // namespace arbor
