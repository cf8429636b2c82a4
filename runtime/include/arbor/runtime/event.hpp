// Event: a manual-reset flag tasks can wait for.
//
//   arbor::Event started;
//   co_await started.wait();   // returns at once while the event is set
//   started.set();             // wakes every waiter; stays set until reset()
//
// Invariant: while the event is set nobody waits (set() wakes the whole list under the lock,
// and wait() on a set event completes without queueing). `set_` is also an atomic so that
// wait() on a set event and is_set() cost one acquire load and no lock; it is written only
// under the lock (release), so a waiter that saw it clear and queued cannot miss the set().
//
// Cancellation: a cancelled waiter leaves with operation_canceled; a waiter already woken by
// set() when the cancellation arrives completes successfully.
//
// Ownership: shared by reference; destroying an Event with waiters ends the process with a
// message (a precondition violation).
#pragma once

#include <atomic>
#include <mutex>

#include "arbor/result.hpp"
#include "arbor/runtime/waiter_list.hpp"

namespace arbor {

class Event {
 public:
  explicit Event(bool set = false) noexcept : set_(set) {}
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() {
    if (!waiters_.empty()) detail::destroyed_with_waiters("arbor::Event");
  }

  class [[nodiscard]] WaitAwaiter : public detail::ParkingAwaiter<WaitAwaiter> {
   public:
    explicit WaitAwaiter(Event& e) noexcept : ParkingAwaiter(e.lock_, e.waiters_), event_(e) {}

    bool await_ready() const noexcept { return event_.is_set(); }
    Result<void> await_resume() noexcept { return finish(); }
    bool try_locked(detail::WakeList&) noexcept {
      return event_.set_.load(std::memory_order_relaxed);  // under the lock: exact
    }

   private:
    Event& event_;
  };

  /// `co_await e.wait()`: Result<void> once the event is set; operation_canceled if the task
  /// is cancelled while it waits.
  WaitAwaiter wait() noexcept { return WaitAwaiter(*this); }

  /// Sets the event and wakes every waiter.
  void set() noexcept {
    detail::WakeList wake;
    lock_.lock();
    set_.store(true, std::memory_order_release);  // publishes what was done before set()
    while (detail::Waiter* w = waiters_.pop_front())
      wake.push(*w);
    lock_.unlock();
  }
  /// Clears the event: later waits park until the next set().
  void reset() noexcept {
    lock_.lock();
    set_.store(false, std::memory_order_relaxed);
    lock_.unlock();
  }
  bool is_set() const noexcept { return set_.load(std::memory_order_acquire); }

  /// Tasks waiting (racy: for tests and metrics).
  std::size_t waiting() noexcept {
    std::lock_guard guard(lock_);
    return waiters_.size();
  }

 private:
  detail::SpinLock lock_;
  std::atomic<bool> set_;
  detail::WaiterList waiters_;  // guarded by lock_
};

}  // namespace arbor
