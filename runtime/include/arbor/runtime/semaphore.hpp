// Semaphore: an async counting semaphore; tasks acquire n permits and park until they can.
//
//   arbor::Semaphore slots(8);
//   auto permit = co_await slots.acquire(2);   // Result<Semaphore::Permit>
//   if (!permit) co_return permit.error();     // cancelled while waiting
//   ...                                        // the permits go back when `permit` goes
//
// Invariant: waiters are served strictly in arrival order. While anyone waits, a new acquire
// queues behind them even if enough permits are free, and release() grants only from the
// front: so a large request is never starved by a stream of small ones (it holds back those
// behind it until it fits). Permits, the list and each waiter's request are guarded by one
// spinlock; releases and cancellations re-run the same grant loop under it.
//
// Cancellation: a cancelled waiter leaves the queue with operation_canceled; if it was at the
// front, the waiters behind it are granted what is now available (no wake-up is lost). A waiter
// already granted its permits when the cancellation arrives keeps them (acquire succeeds).
//
// Ownership: a Permit owns the permits it was granted and gives them back when it is destroyed
// (or release()d); forget() turns them into counted permits that whoever holds them gives back
// with Semaphore::release(n), as a producer hands a slot to a consumer. A Permit must not
// outlive its Semaphore. Destroying a Semaphore with waiters ends the process with a message
// (a precondition violation).
#pragma once

#include <cstddef>
#include <mutex>
#include <optional>
#include <utility>

#include "arbor/result.hpp"
#include "arbor/runtime/waiter_list.hpp"

namespace arbor {

class Semaphore {
 public:
  explicit Semaphore(std::size_t permits) noexcept : permits_(permits) {}
  Semaphore(const Semaphore&) = delete;
  Semaphore& operator=(const Semaphore&) = delete;
  ~Semaphore() {
    if (!waiters_.empty()) detail::destroyed_with_waiters("arbor::Semaphore");
  }

  /// n permits of a Semaphore, given back when it is destroyed. Move-only.
  class [[nodiscard]] Permit {
   public:
    Permit() noexcept = default;  // holds none
    Permit(Permit&& other) noexcept
        : sem_(std::exchange(other.sem_, nullptr)), n_(std::exchange(other.n_, 0)) {}
    Permit& operator=(Permit&& other) noexcept {
      if (this != &other) {
        release();
        sem_ = std::exchange(other.sem_, nullptr);
        n_ = std::exchange(other.n_, 0);
      }
      return *this;
    }
    ~Permit() { release(); }

    /// How many permits it holds.
    std::size_t count() const noexcept { return n_; }
    /// Gives them back now (once; then it holds none).
    void release() noexcept {
      if (sem_ != nullptr) std::exchange(sem_, nullptr)->release(std::exchange(n_, 0));
    }
    /// Keeps them taken and lets go of them: returns how many, for a later
    /// Semaphore::release(n) by whoever takes them over.
    std::size_t forget() noexcept {
      sem_ = nullptr;
      return std::exchange(n_, 0);
    }

   private:
    friend class Semaphore;
    Permit(Semaphore& s, std::size_t n) noexcept : sem_(&s), n_(n) {}
    Semaphore* sem_ = nullptr;
    std::size_t n_ = 0;
  };

  struct Node : detail::Waiter {
    std::size_t wanted = 0;
  };

  class [[nodiscard]] AcquireAwaiter : public detail::ParkingAwaiter<AcquireAwaiter, Node> {
   public:
    AcquireAwaiter(Semaphore& s, std::size_t n) noexcept
        : ParkingAwaiter(s.lock_, s.waiters_), sem_(s) {
      node_.wanted = n;
    }

    Result<Permit> await_resume() noexcept {
      if (auto e = finish()) return e;
      return Permit(sem_, node_.wanted);
    }
    bool try_locked(detail::WakeList&) noexcept { return sem_.take_locked(node_.wanted); }
    void remove_locked(detail::WakeList& wake) noexcept {
      const bool was_front = sem_.waiters_.front() == &node_;
      ParkingAwaiter::remove_locked(wake);
      if (was_front) sem_.grant_locked(wake);
    }

   private:
    Semaphore& sem_;
  };

  /// `co_await s.acquire(n)`: Result<Permit> once n permits are this task's; operation_canceled
  /// if the task is cancelled while it waits. Waiting for more permits than will ever be
  /// released waits forever (until cancelled).
  AcquireAwaiter acquire(std::size_t n = 1) noexcept { return AcquireAwaiter(*this, n); }

  /// Takes n permits if they are free and nobody waits; never waits.
  std::optional<Permit> try_acquire(std::size_t n = 1) noexcept {
    std::lock_guard guard(lock_);
    if (!take_locked(n)) return std::nullopt;
    return Permit(*this, n);
  }

  /// Adds n permits (ones a Permit forgot, or new ones) and wakes the waiters at the front
  /// that they satisfy, in order.
  void release(std::size_t n = 1) noexcept {
    detail::WakeList wake;
    lock_.lock();
    permits_ += n;
    grant_locked(wake);
    lock_.unlock();
  }

  /// Free permits (racy: for tests and metrics).
  std::size_t available() noexcept {
    std::lock_guard guard(lock_);
    return permits_;
  }
  /// Tasks waiting (racy: for tests and metrics).
  std::size_t waiting() noexcept {
    std::lock_guard guard(lock_);
    return waiters_.size();
  }

 private:
  bool take_locked(std::size_t n) noexcept {
    if (!waiters_.empty() || permits_ < n) return false;
    permits_ -= n;
    return true;
  }
  void grant_locked(detail::WakeList& wake) noexcept {
    while (!waiters_.empty()) {
      auto& front = static_cast<Node&>(*waiters_.front());
      if (front.wanted > permits_) break;  // FIFO: the ones behind wait too
      permits_ -= front.wanted;
      waiters_.pop_front();
      wake.push(front);
    }
  }

  detail::SpinLock lock_;
  std::size_t permits_;         // guarded by lock_
  detail::WaiterList waiters_;  // guarded by lock_
};

}  // namespace arbor
