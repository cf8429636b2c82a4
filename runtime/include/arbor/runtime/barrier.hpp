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

  class [[nodiscard]] ArriveAwaiter {
   public:
    explicit ArriveAwaiter(Barrier& b) noexcept : barrier_(b) {}
    ArriveAwaiter(const ArriveAwaiter&) = delete;

    bool await_ready() noexcept { return detail::try_now(*this); }
    template <class P>
    bool await_suspend(std::coroutine_handle<P> h) noexcept {
      return detail::park(*this, h);
    }
    Result<BarrierResult> await_resume() noexcept {
      if (auto e = detail::finish(waiter_, hook_)) return e;
      return BarrierResult{leader_};
    }

    detail::SpinLock& lock() noexcept { return barrier_.lock_; }
    detail::Waiter& waiter() noexcept { return waiter_; }
    detail::CancelHook& hook() noexcept { return hook_; }
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
      barrier_.waiters_.push_back(waiter_);
    }
    void remove_locked(detail::WakeList&) noexcept {
      --barrier_.arrived_;
      barrier_.waiters_.remove(waiter_);
    }

   private:
    Barrier& barrier_;
    detail::Waiter waiter_;
    detail::CancelHook hook_;
    bool leader_ = false;
  };

  /// `co_await b.arrive_and_wait()`: Result<BarrierResult> once n tasks have arrived;
  /// operation_canceled (and the arrival withdrawn) if the task is cancelled while it waits.
  ArriveAwaiter arrive_and_wait() noexcept { return ArriveAwaiter(*this); }

  std::size_t parties() const noexcept { return parties_; }
  /// Completed generations (racy: for tests).
  std::size_t generation() noexcept {
    lock_.lock();
    const std::size_t g = generation_;
    lock_.unlock();
    return g;
  }
  /// Tasks waiting in this generation (racy: for tests and metrics).
  std::size_t waiting() noexcept {
    lock_.lock();
    const std::size_t n = waiters_.size();
    lock_.unlock();
    return n;
  }

 private:
  const std::size_t parties_;
  detail::SpinLock lock_;
  std::size_t arrived_ = 0;     // guarded by lock_
  std::size_t generation_ = 0;  // guarded by lock_
  detail::WaiterList waiters_;  // guarded by lock_
};

}  // namespace arbor
