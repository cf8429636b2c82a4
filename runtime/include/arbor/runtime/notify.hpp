// Notify: wakes one waiting task, or all of them, without losing a notification.
//
//   arbor::Notify ready;
//   // consumer:                         // producer:
//   co_await ready.notified();           //   publish(...); ready.notify_one();
//
// Invariant (Tokio's semantics): notify_one() wakes the first waiter if there is one, and
// otherwise stores a single permit that the next notified() consumes at once, so a
// notification sent just before the consumer starts waiting is not lost; permits do not add
// up (several notify_one() with nobody waiting store one). notify_waiters() wakes every task
// waiting at the time of the call and stores nothing. The permit and the list are guarded by
// one spinlock.
//
// Cancellation: a cancelled waiter leaves with operation_canceled and was handed nothing. A
// waiter that notify_one() had already chosen when its cancellation arrives keeps the
// notification (notified() succeeds): it is never dropped on the floor.
//
// Ownership: a Notify is shared by reference; destroying one with waiters ends the process
// with a message (a precondition violation).
#pragma once

#include <mutex>

#include "arbor/result.hpp"
#include "arbor/runtime/waiter_list.hpp"

namespace arbor {

class Notify {
 public:
  Notify() = default;
  Notify(const Notify&) = delete;
  Notify& operator=(const Notify&) = delete;
  ~Notify() {
    if (!waiters_.empty()) detail::destroyed_with_waiters("arbor::Notify");
  }

  class [[nodiscard]] NotifiedAwaiter : public detail::ParkingAwaiter<NotifiedAwaiter> {
   public:
    explicit NotifiedAwaiter(Notify& n) noexcept
        : ParkingAwaiter(n.lock_, n.waiters_), notify_(n) {}

    Result<void> await_resume() noexcept { return finish(); }
    bool try_locked(detail::WakeList&) noexcept { return std::exchange(notify_.permit_, false); }

   private:
    Notify& notify_;
  };

  /// `co_await n.notified()`: Result<void> when notified (or a stored permit is consumed);
  /// operation_canceled if the task is cancelled while it waits.
  NotifiedAwaiter notified() noexcept { return NotifiedAwaiter(*this); }

  /// Wakes the first waiter, or stores the permit if nobody waits.
  void notify_one() noexcept {
    detail::WakeList wake;
    lock_.lock();
    if (detail::Waiter* w = waiters_.pop_front()) {
      wake.push(*w);
    } else {
      permit_ = true;
    }
    lock_.unlock();
  }

  /// Wakes every task waiting now; stores no permit.
  void notify_waiters() noexcept {
    detail::WakeList wake;
    lock_.lock();
    while (detail::Waiter* w = waiters_.pop_front())
      wake.push(*w);
    lock_.unlock();
  }

  /// Tasks waiting (racy: for tests and metrics).
  std::size_t waiting() noexcept {
    std::lock_guard guard(lock_);
    return waiters_.size();
  }

 private:
  detail::SpinLock lock_;
  bool permit_ = false;         // guarded by lock_
  detail::WaiterList waiters_;  // guarded by lock_
};

}  // namespace arbor
