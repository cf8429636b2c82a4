// Barrier: n tasks wait for each other; the last to arrive releases them all.
//
//   arbor::Barrier phase(3);
//   auto r = co_await phase.arrive_and_wait();   // Result<BarrierResult>
//   if (r && r->is_leader()) merge_results();    // exactly one of the n is the leader
//
// Invariant: `arrived_` counts the tasks waiting in the current generation (always < n between
// calls). The n-th arrival does not queue: it completes at once as the leader, wakes the
// n - 1 waiters (not leaders) and starts the next generation with nobody arrived, so the
// barrier is reusable. All of it happens under one spinlock.
//
// Cancellation: a cancelled waiter withdraws its arrival (arrived_ goes down) and completes
// with operation_canceled: the generation then needs one more arrival. A waiter already
// released by the n-th arrival when its cancellation arrives completes successfully.
//
// Ownership: shared by reference; destroying a Barrier with waiters ends the process with a
// message (a precondition violation).
#pragma once

#include <cstddef>
#include <mutex>

#include "arbor/result.hpp"
#include "arbor/runtime/waiter_list.hpp"

namespace arbor {

struct BarrierResult {
  bool leader = false;
  /// True for exactly one task per generation: the one whose arrival released the others.
  bool is_leader() const noexcept { return leader; }
};

class Barrier {
 public:
  /// n >= 1 parties.
  explicit Barrier(std::size_t n) noexcept : parties_(n == 0 ? 1 : n) {}
  Barrier(const Barrier&) = delete;
  Barrier& operator=(const Barrier&) = delete;
  ~Barrier() {
    if (!waiters_.empty()) detail::destroyed_with_waiters("arbor::Barrier");
  }

  class [[nodiscard]] ArriveAwaiter : public detail::ParkingAwaiter<ArriveAwaiter> {
   public:
    explicit ArriveAwaiter(Barrier& b) noexcept
        : ParkingAwaiter(b.lock_, b.waiters_), barrier_(b) {}

    Result<BarrierResult> await_resume() noexcept {
      if (auto e = finish()) return e;
      return BarrierResult{leader_};
    }
    bool try_locked(detail::WakeList& wake) noexcept {
      if (barrier_.arrived_ + 1 < barrier_.parties_) return false;
      leader_ = true;
      barrier_.arrived_ = 0;
      ++barrier_.generation_;
      while (detail::Waiter* w = barrier_.waiters_.pop_front())
        wake.push(*w);
      return true;
    }
    void enqueue_locked() noexcept {
      ++barrier_.arrived_;
      ParkingAwaiter::enqueue_locked();
    }
    void remove_locked(detail::WakeList& wake) noexcept {
      --barrier_.arrived_;
      ParkingAwaiter::remove_locked(wake);
    }

   private:
    Barrier& barrier_;
    bool leader_ = false;
  };

  /// `co_await b.arrive_and_wait()`: Result<BarrierResult> once n tasks have arrived;
  /// operation_canceled (and the arrival withdrawn) if the task is cancelled while it waits.
  ArriveAwaiter arrive_and_wait() noexcept { return ArriveAwaiter(*this); }

  std::size_t parties() const noexcept { return parties_; }
  /// Completed generations (racy: for tests).
  std::size_t generation() noexcept {
    std::lock_guard guard(lock_);
    return generation_;
  }
  /// Tasks waiting in this generation (racy: for tests and metrics).
  std::size_t waiting() noexcept {
    std::lock_guard guard(lock_);
    return waiters_.size();
  }

 private:
  const std::size_t parties_;
  detail::SpinLock lock_;
  std::size_t arrived_ = 0;     // guarded by lock_
  std::size_t generation_ = 0;  // guarded by lock_
  detail::WaiterList waiters_;  // guarded by lock_
};

}  // namespace arbor
