// TimerWatch: which of several parkers (rings mode: a ring per worker, each worker parked in its
// own) sleeps with the engine's next timer deadline as its timeout. Without it, either every
// sleeper wakes at every deadline, or none does while the worker that last looked at the
// timers runs a long item.
//
// Invariant: while a parker sleeps in the kernel and timers are pending, either the watch's
// holder sleeps towards the earliest deadline, or someone is about to wake a parker that will.
// Kept by these moves, all on the parkers' own `sleeping` flags (set seq_cst before a parker's
// last look, cleared once it returns):
// - take(), by a parker that has announced sleep: takes the watch if it is free or its holder
//   is awake (an awake holder looks at the timers only between items, and its item may be
//   long); the taker then arms the timer queue (TimerQueue::arm(): the deadline it sleeps to).
// - release(), by the holder back from the kernel, after disarming the queue: with the watch
//   free, the next timer added counts as a new earliest one (TimerQueue::disarm()), and
//   EngineCore::earlier_deadline() unparks the holder, or with none hands the watch to a sleeper
//   (finding none, it leaves the watch to the next parker to sleep, which takes it).
// - hand_over(), by a releasing holder with timers pending: gives the watch to a parker still
//   asleep (which the caller wakes, so it sleeps again towards the deadline: rings mode wakes
//   it with Ring::rearm, and it keeps the watch rather than release and pass it on).
// A sleeper that found the holder asleep (take() false) cannot be missed: it stored `sleeping`
// before it loaded the holder, and the holder releases (a seq_cst CAS) before it scans the
// `sleeping` flags, so of the two one sees the other (a Dekker pair); the same holds between a
// sleeper and earlier_deadline()'s scan after its add. Busy parkers catch a due timer when they
// look (WorkerDriver::pending()), whoever holds the watch.
// Costs: a hand-over wakes a second sleeper; it happens only when the holder itself wakes with
// timers pending while another parker sleeps, so under load the watch settles on an idle worker.
#pragma once

#include <atomic>

namespace arbor::io {

class TimerWatch {
 public:
  static constexpr int kNone = -1;

  /// Parker `self`, having announced sleep: whether it holds the watch now (it sleeps towards
  /// the next deadline). `asleep(i)`: whether parker i has announced sleep.
  template <class Asleep>
  bool take(int self, Asleep&& asleep) noexcept {
    int holder = holder_.load(std::memory_order_seq_cst);
    for (;;) {
      if (holder == self) return true;
      if (holder != kNone && asleep(holder)) return false;
      if (holder_.compare_exchange_weak(holder, self, std::memory_order_seq_cst)) return true;
    }
  }

  /// Parker `self`, back from the kernel: gives the watch up if it held it (true).
  bool release(int self) noexcept {
    int expected = self;
    return holder_.compare_exchange_strong(expected, kNone, std::memory_order_seq_cst);
  }

  /// Hands the free watch to the first of `count` parkers from `first` on (modulo `parkers`)
  /// that is asleep. Returns it (the caller unparks it), or kNone if none sleeps or someone
  /// took the watch meanwhile.
  template <class Asleep>
  int hand_over(int first, int count, int parkers, Asleep&& asleep) noexcept {
    for (int k = 0; k < count; ++k) {
      const int candidate = (first + k) % parkers;
      if (!asleep(candidate)) continue;
      int expected = kNone;
      return holder_.compare_exchange_strong(expected, candidate, std::memory_order_seq_cst)
                 ? candidate
                 : kNone;
    }
    return kNone;
  }

  /// The holder, or kNone.
  int holder() const noexcept { return holder_.load(std::memory_order_seq_cst); }

 private:
  std::atomic<int> holder_{kNone};
};

}  // namespace arbor::io
