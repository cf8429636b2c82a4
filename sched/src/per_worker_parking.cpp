// PerWorkerParking: how the workers of a `per_worker_parking` scheduler sleep and are woken,
// each in a parker of its own (its WorkerDriver, e.g. its io_uring ring, or its ThreadBlocker),
// instead of on the shared LifoSemaphore with one worker at a time in the one Driver.
//
// The counts in idle_state_ and their rules (S2/S3, P1/P2/P3, T1/T2) are scheduler.cpp's, kept
// unchanged; what changes is where sleepers are and how one is picked. The sleepers sit on a
// stack, newest on top (the warmest core, as the LIFO semaphore picks), and each worker's
// Worker::sleep says AWAKE, ASLEEP (on the stack) or CLAIMED (popped by a waker), all under
// sleepers_mutex_. The steps, as sched/model/worker_drivers.pml names them (`make model` checks
// the interleavings for 2 and 3 workers, with IO, a long item, spawns and stop()):
//   park:     R0 push ourselves, ASLEEP; P1 count ourselves out; P2 fence, re-check stopping,
//             the drivers' epoch and every queue; P3 anything queued and nobody covering it:
//             WITHDRAW; P4 wait in our parker.
//   wake:     S2 fence + load and S3's rule as in scheduler.cpp; S4 under the mutex: pop the
//             top sleeper, CLAIMED, count the wake (unparked + searching), unpark it.
//   WITHDRAW: under the mutex, CLAIMED: the waker counted us, we are a searcher; else off the
//             stack, AWAKE, and count ourselves back in.
// Why these orders (each a bug the model found when broken): the count of a claim is made
// under the same lock as the claim, so a claimed worker that wakes for its own IO never runs
// uncounted and takes `searching` below 0; the push comes before P2, so a submitter that saw
// our P1 count and found the stack empty pushed its item before our P2 re-check; and stop()
// claims the stack once, so a worker parking after that pass must see stopping_ at P2 (the
// mutex orders its push after the pass).
//
// One deliberate difference from the shared driver: a worker woken by its own IO (not
// claimed) counts itself back in as running, not searching. In the shared mode the reaper is
// the only one watching the kernel and must hand that over (its T2 wake); here every sleeper
// watches its own parker, so that wake would only cost a sleeper a futile trip, on every
// completion. What it reaped is covered as any running worker's queued work is: the first tree
// is its own next item, and dispatch() wakes a helper for a surplus
// (SchedulerWorkerDrivers.AWakeForOwnIoWakesNobodyElse).
#include "per_worker_parking.hpp"

#include <algorithm>
#include <mutex>
#include <thread>

namespace arbor::sched {

using detail::kSearchingOne;
using detail::kUnparkedOne;
using detail::searching_of;
using detail::unparked_of;

Scheduler::PerWorkerParking::PerWorkerParking(Scheduler& s) : Parking(s) {
  sleeper_stack_.reserve(static_cast<std::size_t>(s.max_workers_));  // never grows after this
}

void Scheduler::PerWorkerParking::wake_all_for_stop(int /*started*/) noexcept {
  // A worker that parks after this pass sees stopping_ at its P2 (the mutex orders its push
  // after our claim).
  claim_all_sleepers();
}

void Scheduler::PerWorkerParking::blocking_entered(Worker& w) noexcept {
  // Nobody else can reap the worker's own driver (a ring per worker has one issuer): what has
  // completed so far goes to everyone too (dispatched inside an item while `blocking` is set:
  // to the global queue).
  look(w, /*inside_item=*/true);
}

void Scheduler::PerWorkerParking::blocking_covered(Worker& w, Worker* spare) noexcept {
  if (w.blocking != 1 || w.own_driver == nullptr) return;
  // The driver hands what it still watches to the other workers' drivers (blocking_region.hpp
  // says what may stay). A spare started just now is to take it when every other worker
  // blocks too: its driver must be open first, so we wait for its first pass (a thread's
  // start; it opens the driver before anything else: run_worker()). Woken sleepers and
  // running workers have theirs open already.
  if (spare != nullptr)
    while (!spare->passed_once.load(std::memory_order_acquire))
      spare->passed_once.wait(false, std::memory_order_acquire);
  w.own_driver->before_blocking();
}

void Scheduler::PerWorkerParking::blocking_left(Worker& w) noexcept {
  if (w.blocking == 0 && w.own_driver != nullptr) w.own_driver->after_blocking();
}

void Scheduler::PerWorkerParking::park(Worker& w) noexcept {
  // Never sleep in a driver that is being detached; a worker without one (a spare whose driver
  // could not be set up, say) asks again, so a failure for a moment is not for good.
  sync_own_driver(w, /*retry=*/true);
  if (auto* hook = detail::before_park_count_hook.load(std::memory_order_relaxed)) hook();
  {
    std::lock_guard lock(sleepers_mutex_);  // R0
    sleeper_stack_.push_back(&w);           // reserved for every worker: never allocates
    w.sleep = Worker::Sleep::asleep;
  }
  const std::uint32_t leaving = kUnparkedOne + (w.searching ? kSearchingOne : 0);
  s_.idle_state_.fetch_sub(leaving, std::memory_order_seq_cst);  // P1
  w.searching = false;
  if (auto* hook = detail::inside_park_hook.load(std::memory_order_relaxed)) hook();
  // P2. Pairs with the fence in s_.notify_parked() (S2), as in scheduler.cpp's park().
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (s_.stopping_.load(std::memory_order_relaxed) ||
      drivers_epoch_.load(std::memory_order_relaxed) != w.drivers_epoch) {
    withdraw(w);  // stop() or a detach claimed the stack before our push: see it ourselves
    return;
  }
  if (s_.anything_queued()) {
    // P3: covered if someone searches or enough are awake (a wake counted for us then, if
    // any, ends our wait at once); otherwise the work is ours to find.
    const std::uint32_t s = s_.idle_state_.load(std::memory_order_relaxed);
    if (searching_of(s) == 0 &&
        static_cast<int>(unparked_of(s)) - s_.blocked_.load(std::memory_order_relaxed) <
            s_.workers_) {
      withdraw(w);
      return;
    }
  }
  bool reaped = false;
  for (;;) {  // P4
    if (w.own_driver != nullptr) {
      w.counters.bump(detail::CounterBlock::driver_waits);
      reaped = w.own_driver->wait(-1);
    } else {
      w.counters.bump(detail::CounterBlock::parks);
      if (auto* hook = detail::before_park_sleep_hook.load(std::memory_order_relaxed)) hook();
      w.blocker.wait();
      if (auto* hook = detail::after_park_wake_hook.load(std::memory_order_relaxed)) hook();
    }
    std::unique_lock lock(sleepers_mutex_);
    if (w.sleep == Worker::Sleep::claimed) {
      w.sleep = Worker::Sleep::awake;  // our waker counted us in, as a searcher (S4)
      lock.unlock();
      w.searching = true;
      break;
    }
    const bool leave = reaped || s_.stopping_.load(std::memory_order_relaxed) ||
                       drivers_epoch_.load(std::memory_order_relaxed) != w.drivers_epoch;
    if (!leave) continue;  // a stale unpark, or IO not finished: still asleep, counted so
    sleeper_stack_.erase(std::find(sleeper_stack_.begin(), sleeper_stack_.end(), &w));
    w.sleep = Worker::Sleep::awake;
    lock.unlock();
    count_in(w, /*may_search=*/!reaped);  // woken by our own IO: running, see the top
    break;
  }
  if (reaped) hand_out(w, /*inside_item=*/false, [&] { w.own_driver->dispatch(); });
}

void Scheduler::PerWorkerParking::withdraw(Worker& w) noexcept {
  {
    std::lock_guard lock(sleepers_mutex_);
    if (w.sleep == Worker::Sleep::claimed) {
      // A waker popped and counted us between R0 and now; its unpark stays in our parker and
      // ends our next wait at once, which finds nothing and waits again.
      w.sleep = Worker::Sleep::awake;
      w.searching = true;
      return;
    }
    sleeper_stack_.erase(std::find(sleeper_stack_.begin(), sleeper_stack_.end(), &w));
    w.sleep = Worker::Sleep::awake;
  }
  count_in(w, /*may_search=*/true);
}

void Scheduler::PerWorkerParking::count_in(Worker& w, bool may_search) noexcept {
  // As a searcher only if nobody searches (T1 always allows one), as a woken sleeper is
  // counted: then a notify that saw us as a searcher has us to cover its work.
  std::uint32_t s = s_.idle_state_.load(std::memory_order_relaxed);
  bool search = false;
  do {
    search = may_search && searching_of(s) == 0;
  } while (!s_.idle_state_.compare_exchange_weak(s, s + kUnparkedOne + (search ? kSearchingOne : 0),
                                                 std::memory_order_seq_cst,
                                                 std::memory_order_relaxed));
  w.searching = search;
}

bool Scheduler::PerWorkerParking::wake(std::uint32_t s, bool* woke, bool /*handover*/) noexcept {
  // S3, as in s_.notify_parked(): nobody is woken while someone searches or enough are awake.
  if (searching_of(s) != 0) return true;
  if (static_cast<int>(unparked_of(s)) - s_.blocked_.load(std::memory_order_relaxed) >= s_.workers_)
    return true;
  if (auto* hook = detail::before_sleeper_claim_hook.load(std::memory_order_relaxed)) hook();
  Worker* futex_sleeper = nullptr;
  {
    std::lock_guard lock(sleepers_mutex_);  // S4
    // S3 again on a load taken under the lock: every claim is counted under it, so one made
    // since our load above is seen here, and two notifiers that both saw nobody searching do
    // not each claim a sleeper (the shared mode's CAS gives the same). Still after our S2
    // fence, so the Dekker argument holds for this load as for the first.
    s = s_.idle_state_.load(std::memory_order_relaxed);
    if (searching_of(s) != 0) return true;
    if (static_cast<int>(unparked_of(s)) - s_.blocked_.load(std::memory_order_relaxed) >=
        s_.workers_)
      return true;
    if (sleeper_stack_.empty()) return false;
    Worker& v = *sleeper_stack_.back();
    sleeper_stack_.pop_back();
    v.sleep = Worker::Sleep::claimed;
    // Counted inside the critical section that claims it: a claim is never seen uncounted.
    s_.idle_state_.fetch_add(kSearchingOne + kUnparkedOne, std::memory_order_seq_cst);
    if (v.own_driver != nullptr) {
      v.own_driver->unpark();  // under the lock: v cannot close its driver before this ends
    } else {
      futex_sleeper = &v;  // a ThreadBlocker lives as long as the scheduler: wake it unlocked
    }
  }
  if (futex_sleeper != nullptr) futex_sleeper->blocker.wake();
  s_.counter_block().add(detail::CounterBlock::wakes);
  if (woke != nullptr) *woke = true;
  return true;
}

void Scheduler::PerWorkerParking::claim_all_sleepers() noexcept {
  std::lock_guard lock(sleepers_mutex_);
  while (!sleeper_stack_.empty()) {
    Worker& v = *sleeper_stack_.back();
    sleeper_stack_.pop_back();
    v.sleep = Worker::Sleep::claimed;
    s_.idle_state_.fetch_add(kSearchingOne + kUnparkedOne, std::memory_order_seq_cst);
    unpark_claimed(v);
  }
}

void Scheduler::PerWorkerParking::unpark_claimed(Worker& v) noexcept {
  if (v.own_driver != nullptr) {
    v.own_driver->unpark();
  } else {
    v.blocker.wake();
  }
}

bool Scheduler::PerWorkerParking::look(Worker& w, bool inside_item) noexcept {
  w.since_poll = 0;
  WorkerDriver* driver = w.own_driver;
  // pending() is a load or two: the common "nothing there" costs no system call.
  if (driver == nullptr || !driver->pending()) return false;
  w.counters.bump(detail::CounterBlock::driver_polls);
  if (!driver->wait(0)) return false;
  // From inside an item (Scheduler::poll_driver()), what it dispatches is work that item
  // queued: the item's own wake decision (settled at its end) covers it.
  hand_out(w, inside_item, [&] { driver->dispatch(); });
  return true;
}

void Scheduler::PerWorkerParking::sync_own_driver(Worker& w, bool retry) noexcept {
  // Acquire: an attach stores worker_drivers_ before it bumps the epoch.
  const std::uint64_t epoch = drivers_epoch_.load(std::memory_order_acquire);
  // Asking again: the drivers of our epoch refused us, and we have none.
  const bool again = retry && epoch == w.drivers_epoch && w.refused != nullptr;
  if (epoch == w.drivers_epoch && !again) return;
  close_own_driver(w);
  w.drivers_epoch = epoch;
  // Counted before the pointer is read, both seq_cst: detach_worker_drivers() clears the
  // pointer and then waits for the count, so either it waits for us or we see no drivers.
  open_drivers_.fetch_add(1, std::memory_order_seq_cst);
  WorkerDrivers* drivers = worker_drivers_.load(std::memory_order_seq_cst);
  // Asking again, only the drivers that refused us: others came with an attach whose epoch we
  // have not seen yet, and opening them now under the old epoch would open them twice (once
  // here, again at that epoch; SchedulerWorkerDrivers.EachWorkerOpensAndClosesItsDriverOnItsOwn-
  // Thread caught it under TSan).
  if (again && drivers != w.refused) drivers = nullptr;
  WorkerDriver* driver = drivers != nullptr ? drivers->open(w.index) : nullptr;
  w.refused = driver == nullptr ? drivers : nullptr;
  if (driver == nullptr) {
    if (open_drivers_.fetch_sub(1, std::memory_order_release) == 1) open_drivers_.notify_all();
    return;
  }
  w.own_driver = driver;
  w.own_drivers = drivers;
}

void Scheduler::PerWorkerParking::close_own_driver(Worker& w) noexcept {
  if (w.own_driver == nullptr) return;
  // We are awake, so off the sleeper stack: no waker reaches own_driver any more (they do only
  // through the stack, under the mutex our last wake or withdrawal took).
  w.own_drivers->close(w.index, *w.own_driver);
  w.own_driver = nullptr;
  w.own_drivers = nullptr;
  // Release: our last use of the driver comes before detach_worker_drivers()'s return.
  if (open_drivers_.fetch_sub(1, std::memory_order_release) == 1) open_drivers_.notify_all();
}

bool Scheduler::PerWorkerParking::attach_worker_drivers(WorkerDrivers& drivers) noexcept {
  // On a worker, try_lock, not lock: a detach holds the mutex while it waits for every worker
  // to close its driver, and this worker would never close it (deadlock). So from a worker an
  // attach is refused while another attach or a detach is under way (drivers are attached
  // until then). Elsewhere it waits, as before (try_lock may also fail spuriously).
  std::unique_lock guard(attach_mutex_, std::defer_lock);
  if (Scheduler::current() == &s_) {
    if (!guard.try_lock()) return false;
  } else {
    guard.lock();
  }
  if (worker_drivers_.load(std::memory_order_relaxed) != nullptr) return false;
  worker_drivers_.store(&drivers, std::memory_order_seq_cst);
  drivers_epoch_.fetch_add(1, std::memory_order_seq_cst);
  // Awake workers open theirs at their next pass; sleepers are woken for it. One that parks
  // after this pass sees the new epoch at its P2 (the mutex orders it) and withdraws.
  claim_all_sleepers();
  return true;
}

void Scheduler::PerWorkerParking::detach_worker_drivers() noexcept {
  std::lock_guard guard(attach_mutex_);
  if (worker_drivers_.exchange(nullptr, std::memory_order_seq_cst) == nullptr) return;
  drivers_epoch_.fetch_add(1, std::memory_order_seq_cst);
  claim_all_sleepers();  // as in attach: each closes its driver on its own thread
  // seq_cst, not just acquire: this load and sync_own_driver()'s are the two halves of a store-
  // buffering pair (we store worker_drivers_, then load the count; it adds to the count, then
  // loads worker_drivers_). With an acquire load here, both may read the old values (ARMv8.3
  // LDAPR may pass the exchange's store), and we would return while it opens the old drivers.
  // It also acquires close_own_driver()'s release: their last uses come before our return.
  for (int open = open_drivers_.load(std::memory_order_seq_cst); open != 0;
       open = open_drivers_.load(std::memory_order_seq_cst))
    open_drivers_.wait(open, std::memory_order_acquire);
}

}  // namespace arbor::sched
