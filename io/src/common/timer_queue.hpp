// TimerQueue: the pending timers of one engine, a binary min-heap of intrusive Timer nodes.
//
// A heap rather than a timing wheel: the commonest timer (with_timeout, a read deadline) is
// cancelled before it fires, and a node that remembers its heap index is removed in O(log n)
// without scanning; 100k pending timers are 17 levels deep. A wheel makes insertion O(1) but
// needs a tick (wake-ups while idle) or cascading, and its resolution is the tick. Memory: the
// heap is a vector of pointers that grows to the largest number of timers ever pending at once
// and is reused after that, so steady state does not allocate.
//
// Thread-safe (one mutex): timers are added and cancelled from workers and fired by poller 0
// (rings mode: by whichever worker's ring finds them due).
// Private to io: the Engine owns one; users hold Timers and go through Engine::add_timer().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "arbor/io/timer.hpp"

namespace arbor::io {

class TimerQueue {
 public:
  enum class Added { queued, queued_earliest, cancelled };
  /// Queues `timer` unless cancel() already ran for it. queued_earliest: it is due before the
  /// deadline the poller last armed (see arm()), so the poller must be woken to re-arm.
  Added add(Timer& timer);
  /// The earliest deadline (INT64_MAX when empty), recorded as the one the poller sleeps
  /// towards. Doing both under one lock is what makes add()'s answer race-free.
  std::int64_t arm() noexcept;
  /// Records that nobody sleeps towards a deadline now: the next add() says queued_earliest,
  /// so its caller finds someone to sleep towards it (rings mode's timer watch); later ones do
  /// if they are earlier still.
  void disarm() noexcept;
  /// Marks `timer` cancelled and unqueues it if it has not been popped yet; returns whether it
  /// was unqueued. Marking under the lock closes the race with a concurrent add().
  bool cancel(Timer& timer) noexcept;
  /// Moves every queued timer to `out` (each marked cancelled) and refuses every later add().
  void cancel_all(std::vector<Timer*>& out);
  /// Pops up to `max` timers with deadline <= now into out, earliest first.
  std::size_t pop_expired(std::int64_t now, Timer** out, std::size_t max) noexcept;
  std::size_t size() const noexcept;
  /// The earliest deadline queued (INT64_MAX when empty), without the lock: a hint for a busy
  /// worker's look (rings mode), which may read it a moment late; the timer watch is what
  /// guarantees a sleeping engine wakes for it.
  std::int64_t earliest() const noexcept { return earliest_.load(std::memory_order_relaxed); }

 private:
  void sift_up(std::size_t i) noexcept;
  void sift_down(std::size_t i) noexcept;
  // Under mutex_, after every change to the heap's front.
  void publish_earliest() noexcept {
    earliest_.store(heap_.empty() ? kNever : heap_.front()->deadline_ns, std::memory_order_relaxed);
  }
  static constexpr std::int64_t kNever = INT64_MAX;
  void place(std::size_t i, Timer* t) noexcept {
    heap_[i] = t;
    t->heap_index = i;
  }
  mutable std::mutex mutex_;
  std::vector<Timer*> heap_;
  std::int64_t armed_ = 0;                      // guarded by mutex_
  bool closed_ = false;                         // guarded by mutex_: cancel_all() ran
  std::atomic<std::int64_t> earliest_{kNever};  // written under mutex_, read without it
};

}  // namespace arbor::io
