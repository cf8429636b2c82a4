// SharedParking: the workers share one LifoSemaphore to sleep on and one Driver (an engine's
// epoll set or its shared io_uring ring), which one worker at a time waits in: the holder of
// the poll right. Scheduler::Parking (parking.hpp) is the seam; scheduler.cpp keeps the counts
// and the steps this file's comments name (S2-S4, P1-P4, T1, T2).
//
// The driver's steps. A parker that takes the poll right sleeps in the driver, not on the
// semaphore, and sets idle_state_'s driver bit in the same step as P1 (D1), so S3 always knows
// where the sleepers are: started - unparked are asleep, one of them in the driver if the bit
// is set. S3 wakes a semaphore sleeper when there is one (the driver's sleeper stays in the
// kernel, waiting for IO), and the driver's sleeper only when it is the last one asleep: it
// claims it by clearing the bit in the same CAS that counts the wake, then unparks the driver
// (D2). On its way out (D3), a driver sleeper whose bit was cleared was counted in by its
// waker, like a woken sleeper; one whose bit is still set clears it and counts itself back in
// (as a searcher if nobody searches, see leave_driver()), which breaks no rule of
// scheduler.cpp's, since no wake was ever counted for it. Only the holder of the poll right
// sets the bit, so there is at most one driver sleeper. Every release of the right hands the
// kernel over by S3's rule (release_poll_right()): a holder going on to run a long item never
// leaves the kernel unwatched while other workers sleep
// (WorkerPolling.AnIdleWorkerReapsWhileTheOtherRunsALongItem).
//
// Model-checked: sched/model/park_notify.pml (the counts, the driver bit, attach and detach)
// and sched/model/poll_right_release.pml (the release's fence), `make model`.
#include "shared_parking.hpp"

#include <thread>

namespace arbor::sched {

using detail::after_park_wake_hook;
using detail::before_park_count_hook;
using detail::before_park_sleep_hook;
using detail::driver_asleep;
using detail::inside_park_hook;
using detail::kDriverAsleep;
using detail::kSearchingOne;
using detail::kUnparkedOne;
using detail::release_unwoken_hook;
using detail::release_woke_hook;
using detail::searching_of;
using detail::unparked_of;

bool Scheduler::SharedParking::wake(std::uint32_t s, bool* woke, bool handover) noexcept {
  bool to_driver = false;
  for (;;) {                                        // S3
    if (handover && driver_asleep(s)) return true;  // someone took the right: it is in the kernel
    if (searching_of(s) != 0) return true;  // a searcher (or a counted wake) will find the work
    const int unparked = static_cast<int>(unparked_of(s));
    if (unparked - s_.blocked_.load(std::memory_order_relaxed) >= s_.workers_) return true;
    const int asleep = s_.started_.load(std::memory_order_acquire) - unparked;
    if (asleep <= 0) return false;  // nobody asleep
    // Wake a sleeper on the semaphore if there is one: the worker in the driver stays there,
    // waiting for IO. If it is the only one asleep, clearing its bit claims it (D2).
    to_driver = driver_asleep(s) && asleep == 1;
    const std::uint32_t next = s + kSearchingOne + kUnparkedOne - (to_driver ? kDriverAsleep : 0);
    if (s_.idle_state_.compare_exchange_weak(s, next, std::memory_order_seq_cst,
                                             std::memory_order_relaxed))
      break;
  }
  s_.counter_block().add(detail::CounterBlock::wakes);
  if (woke != nullptr) *woke = true;
  if (to_driver) {
    unpark_driver();  // S4 (D2)
  } else {
    sleepers_.release(1);  // S4
  }
  return true;
}

void Scheduler::SharedParking::wake_all_for_stop(int started) noexcept {
  sleepers_.release(static_cast<std::uint32_t>(started));
  unpark_driver();  // a worker waiting in the driver has no deadline of ours
}

bool Scheduler::SharedParking::nudge_sleepers() noexcept {
  // Only while nothing is counted awake: then no wake is pending (a counted wake counts as
  // unparked), so every worker counted asleep is the driver's sleeper or on its way to the
  // semaphore or on it, and the nudge must find all of the latter on it. One still on its way
  // (counted at P1, not yet registered) is a thread in user space that the kernel may owe task
  // work; the semaphore refuses, and the caller asks again at its next look. A count that moves
  // meanwhile makes the semaphore refuse too, or makes the caller's next look not idle. No
  // change to the counts or to S1-S4/P1-P4: the nudged stay inside the semaphore's wait(), as
  // a chosen waiter whose signal was taken does (what park_notify.pml's semaphore abstracts).
  const std::uint32_t s = s_.idle_state_.load(std::memory_order_seq_cst);
  if (unparked_of(s) != 0) return false;
  const int asleep = s_.started_.load(std::memory_order_acquire) - (driver_asleep(s) ? 1 : 0);
  return asleep >= 0 && sleepers_.nudge(static_cast<std::uint32_t>(asleep));
}

void Scheduler::SharedParking::park(Worker& w) noexcept {
  // D1: the worker that gets the poll right sleeps in the driver instead of on the semaphore,
  // and says so in the same step that counts it asleep, so a waker always knows where it is.
  // The driver we hold the right to, if we got it; only this pointer is used afterwards, since
  // detach_driver() may clear driver_ meanwhile (it waits for our right, not for driver_).
  Driver* held = try_take_poll_right();
  const bool saw_driver = held != nullptr || driver_.load(std::memory_order_relaxed) != nullptr;
  const bool holder = held != nullptr;
  if (auto* hook = before_park_count_hook.load(std::memory_order_relaxed)) hook();
  const std::uint32_t leaving = kUnparkedOne + (w.searching ? kSearchingOne : 0);
  if (holder) {
    s_.idle_state_.fetch_add(kDriverAsleep - leaving, std::memory_order_seq_cst);  // P1 + D1
  } else {
    s_.idle_state_.fetch_sub(leaving, std::memory_order_seq_cst);  // P1
  }
  w.searching = false;
  if (auto* hook = inside_park_hook.load(std::memory_order_relaxed)) hook();
  // P2. Pairs with the fence in notify_parked() (S2); see the protocol at the top of
  // scheduler.cpp.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (s_.stopping_.load(std::memory_order_relaxed)) {
    // stop() posts a signal per worker and joins us; the counts no longer matter, only that
    // the driver's bit does not outlive its holder.
    if (holder) {
      leave_driver(w);
      release_poll_right();
    } else {
      s_.idle_state_.fetch_add(kUnparkedOne, std::memory_order_seq_cst);
    }
    return;
  }
  // A driver attached after we looked (and before P1) may have pending IO, and its attach's
  // wake may have gone to nobody (it saw us awake): treat it as queued work. attach_driver()
  // stores driver_ before its S2, so this load after P2 is the other half of that Dekker pair.
  const bool driver_appeared = !saw_driver && driver_.load(std::memory_order_relaxed) != nullptr;
  // The handover's other half: the right we found taken may have been released after our look,
  // by a holder whose handover (S3) still counted us awake and so went to nobody. Its store
  // comes before its S2 fence and our P1 before our P2: one of us sees the other. Then the
  // right is ours to take.
  const bool right_freed = !holder && saw_driver && !poll_right_.load(std::memory_order_relaxed) &&
                           driver_.load(std::memory_order_relaxed) != nullptr;
  if (driver_appeared || right_freed || s_.anything_queued()) {
    // P3. Work arrived while we were deciding to sleep, and its submitter may have counted on
    // us being awake. From P1 on we count as asleep, so we may come back only the way a
    // sleeper is woken: counted in by the rule of S3. If someone searches already (possibly a
    // wake a submitter counted just now for a sleeper — for us, if we sleep) or enough workers
    // are awake, they cover the work, and we sleep; the signal of a wake counted on our behalf
    // wakes us at once. Re-adding ourselves as unparked-but-not-searching instead (the old
    // protocol) leaves such a counted wake with nobody behind it: a searcher that fills the
    // searcher cap while its signal waits for a sleeper that never comes (the model's
    // "phantom searcher"). The driver's sleeper may find itself claimed already (D2): a waker
    // counted it in, so it is back.
    std::uint32_t s = s_.idle_state_.load(std::memory_order_relaxed);
    for (;;) {
      if (holder && !driver_asleep(s)) {
        w.searching = true;
        release_poll_right();
        return;
      }
      if (searching_of(s) != 0 ||
          static_cast<int>(unparked_of(s)) - s_.blocked_.load(std::memory_order_relaxed) >=
              s_.workers_)
        break;
      const std::uint32_t next = s + kSearchingOne + kUnparkedOne - (holder ? kDriverAsleep : 0);
      if (s_.idle_state_.compare_exchange_weak(s, next, std::memory_order_seq_cst,
                                               std::memory_order_relaxed)) {
        w.searching = true;
        if (holder) release_poll_right();
        return;
      }
    }
  }
  if (holder) {
    wait_in_driver(w, *held);
    return;
  }
  w.counters.bump(detail::CounterBlock::parks);
  if (auto* hook = before_park_sleep_hook.load(std::memory_order_relaxed)) hook();
  sleepers_.wait();  // P4
  if (auto* hook = after_park_wake_hook.load(std::memory_order_relaxed)) hook();
  // Whoever woke us counted us as unparked and searching (S3).
  w.searching = true;
}

void Scheduler::SharedParking::leave_driver(Worker& w) noexcept {
  // D3. Claimed by a waker (D2): it counted us unparked and searching, as S3 counts a sleeper
  // it wakes. Otherwise nobody counted a wake for us (S3 wakes the driver's sleeper only when
  // it is the last one asleep, and then claims it by clearing the bit; a wake for the
  // semaphore never counts on it), so we count ourselves back in; as a searcher if nobody
  // searches (T1 always allows one), as a woken sleeper is counted. Then our release's handover
  // (S3) sees a searcher and wakes nobody: we cover it ourselves, parking back into the driver
  // if we reaped nothing (an engine's unpark for a busy worker's request), or finding what we
  // reaped and, as the last searcher, waking a sleeper at T2. Counted in not searching, an
  // empty reap would wake a semaphore sleeper only for it to park again
  // (SchedulerDriver.AnUnparkWithNothingReapedWakesNobodyElse). If someone else searches, it
  // covers the handover, and a surplus of what we reaped is announced by dispatch().
  std::uint32_t s = s_.idle_state_.load(std::memory_order_relaxed);
  for (;;) {
    if (!driver_asleep(s)) {
      w.searching = true;
      return;
    }
    const bool search = searching_of(s) == 0;
    if (s_.idle_state_.compare_exchange_weak(
            s, s - kDriverAsleep + kUnparkedOne + (search ? kSearchingOne : 0),
            std::memory_order_seq_cst, std::memory_order_relaxed)) {
      w.searching = search;
      return;
    }
  }
}

void Scheduler::SharedParking::wait_in_driver(Worker& w, Driver& driver) noexcept {
  // detach_driver() waits for the right before it lets the driver go, so `driver` (what we saw
  // when we took the right) stays valid until we release it.
  w.counters.bump(detail::CounterBlock::driver_waits);
  driver.wait(-1);
  // Out of the driver before dispatching: what we hand out may need a helper woken, and S3
  // must not pick us (still marked asleep) to be that helper.
  leave_driver(w);
  hand_out(w, /*inside_item=*/false, [&] { driver.dispatch(); });
  release_poll_right();  // and hands the kernel over: we go on to run what we reaped
}

Driver* Scheduler::SharedParking::try_take_poll_right() noexcept {
  if (driver_.load(std::memory_order_relaxed) == nullptr) return nullptr;
  if (poll_right_.load(std::memory_order_relaxed) ||
      poll_right_.exchange(true, std::memory_order_seq_cst))
    return nullptr;
  // Pairs with detach_driver(), which clears driver_ and then waits for the right to be free:
  // either it sees our right taken and waits for us, or we see the driver gone. The pointer
  // read here is the one to use until the right is released: driver_ may be cleared meanwhile.
  Driver* driver = driver_.load(std::memory_order_seq_cst);
  if (driver == nullptr) release_poll_right();
  return driver;
}

void Scheduler::SharedParking::release_poll_right() noexcept {
  // Release: the driver's own state (what the last holder reaped, its buffers) passes to the
  // next holder, whose exchange in try_take_poll_right() acquires it, and to detach_driver()'s
  // loads.
  poll_right_.store(false, std::memory_order_release);
  // The handover. Whoever releases the right may go on to run items for long (what it reaped,
  // or the item that looked), and a worker may have gone to sleep on the semaphore because we
  // held the right: then nobody would wait in the kernel, and completions and timers would wait
  // for our items to end. So every release looks for a sleeper, by the rule of S3: it wakes one
  // (it finds no work and parks into the driver) unless someone searches (a searcher parks into
  // the driver, or finds work and, as the last searcher, wakes one itself at T2) or enough are
  // awake, or someone has taken the right since and sleeps in the driver. "Enough awake" counts
  // the configured workers: with spares (blocking regions) a spare may sleep while that many
  // run items and nobody watches the kernel, as with no spare and every worker busy; the busy
  // workers' looks then reap. notify_parked()'s S2 fence orders our store before its load of
  // idle_state_; it pairs with park()'s P1 and P2 fence before its right_freed load: either we see
  // the parker asleep, or it sees the right free. (A release store is enough for that: the fence
  // does the ordering; x86: mov + mfence. sched/model/poll_right_release.pml shows the fence is
  // needed.) A worker that parks after its release wakes someone it did not need to at most when
  // nobody searches, and nobody does only if it did not search either: after a busy look, which
  // goes on to run items. Model-checked (sched/model/park_notify.pml, `make model`) for 2 and 3
  // workers with long items, items that look into the driver first, attach and detach; it
  // replaces a protocol of "wishes" (a count a parker raised when it found the right taken,
  // which a release cleared after a wake), which the model showed stranding a completion when
  // a woken worker took the right only for a look. Tests: SchedulerDriver.TwoRacingReleases
  // LeaveSomeoneInTheKernel, SchedulerDriver.AParkDuringAReleasesWakeIsSeenByTheNextRelease.
  bool woke = false;
  s_.notify_parked(&woke, /*handover=*/true);
  if (woke) {
    if (auto* hook = release_woke_hook.load(std::memory_order_relaxed)) hook();
  } else if (auto* hook = release_unwoken_hook.load(std::memory_order_relaxed)) {
    hook();
  }
}

bool Scheduler::SharedParking::look(Worker& w, bool inside_item) noexcept {
  Driver* driver = try_take_poll_right();
  if (driver == nullptr) return false;
  w.counters.bump(detail::CounterBlock::driver_polls);
  driver->wait(0);
  // From inside an item (Scheduler::poll_driver()), what it dispatches is work that item
  // queued: the item's own wake decision (notify_deferred, settled at its end) covers it.
  hand_out(w, inside_item, [&] { driver->dispatch(); });
  release_poll_right();
  return true;
}

void Scheduler::SharedParking::unpark_driver() noexcept {
  // Counted in unparkers_ before reading driver_, so detach_driver() (which clears driver_ and
  // then waits for unparkers_ to drain) cannot let the driver go while we call it.
  unparkers_.fetch_add(1, std::memory_order_seq_cst);
  if (Driver* driver = driver_.load(std::memory_order_seq_cst)) driver->unpark();
  unparkers_.fetch_sub(1, std::memory_order_release);
}

bool Scheduler::SharedParking::attach_driver(Driver& driver) noexcept {
  Driver* expected = nullptr;
  if (!driver_.compare_exchange_strong(expected, &driver, std::memory_order_seq_cst)) return false;
  // Workers asleep on the semaphore do not look at the driver until they park again; if all
  // sleep, wake one, so that it parks again and waits in the driver.
  s_.notify_parked();
  return true;
}

void Scheduler::SharedParking::detach_driver() noexcept {
  Driver* driver = driver_.exchange(nullptr, std::memory_order_seq_cst);
  if (driver == nullptr) return;
  // A holder may be waiting in it with no deadline: unpark until it lets go. Unparks are
  // sticky, so one that lands between the holder's checks still ends its next wait. The
  // acquire loads order the holder's (and unparkers') last use before our return.
  while (poll_right_.load(std::memory_order_seq_cst) ||
         unparkers_.load(std::memory_order_seq_cst) != 0) {
    driver->unpark();
    std::this_thread::yield();
  }
}

}  // namespace arbor::sched
