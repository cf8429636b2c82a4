// UringEngine, rings mode (IoMode::rings): a ring per scheduler worker slot (spares included),
// each worker parked in its own (WorkerRing, a sched::WorkerDriver; WorkerRings opens and closes
// them). Where sockets go and how a blocked worker lends its ring: ring_lending.cpp.
//
// Invariants, on top of ring.hpp's and engine.hpp's:
// - A ring is created (a worker's by init(), a spare's by the spare), submitted to and reaped
//   only on its owner's thread (the worker that opened it): it is single-issuer where the kernel
//   allows, made disabled and enabled by the owner in open(), so no other thread may even
//   submit. Everyone else reaches it through its request queue (`Ring::incoming`), and wakes the
//   owner only if it announced sleep; the owner's own requests wait in the queue until its next
//   look or sleep, which drains and submits them in the same io_uring_enter that reaps. A
//   worker's ring that cannot be made fails Engine::create(); a spare's leaves the spare parked
//   on a futex.
// - Closing a ring (detach, or its worker exiting) retires it first, then, on the owner,
//   cancels everything it has in flight and reaps until nothing is (`Ring::in_flight` == 0), so
//   the kernel never writes into memory we gave back; ~Ring exits it, with the engine. Requests
//   that reach a retired ring are finished by whoever queued them, without the kernel: starts
//   and waiting readers complete with -ECANCELED, closes close the fd (finish_retired()).
// - Timers: the TimerQueue is shared. One sleeping ring holds the timer watch and sleeps
//   towards the earliest deadline (common/timer_watch.hpp says how it moves); any ring's wait
//   takes the timers due, and a busy owner's pending() says yes once one is. Spares have rings,
//   so while every worker blocks in a region a spare watches them
//   (BlockingRegionTest.ATimerFiresWhileEveryWorkerBlocksInARegion).
// - A paused (test) clock jumps only from the watcher, as common/timer_plan.hpp says, with no
//   ring between its reap and its dispatch (`rings_in_hand_`: a timer popped by one ring is run
//   before another jumps the clock past it) and nothing ready in any ring
//   (completions_ready(): BlockingRegionTest.APausedClockDoesNotJumpPastAPendingCompletion).
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <limits>

#include "arbor/internal/log.hpp"
#include "arbor/io/clock.hpp"
#include "arbor/sync/timespec.hpp"
#include "common/timer_plan.hpp"
#include "common/timer_queue.hpp"
#include "linux/uring/engine.hpp"

namespace arbor::io::uring {
namespace {

constexpr std::int64_t kNever = TimerPlan::kNever;
// A closing ring waits this long at a time for what it cancelled, saying so if it must wait
// again (a request the kernel cannot cancel would otherwise hang the close silently).
constexpr std::int64_t kCloseWaitNs = 1'000'000'000;

}  // namespace

// --- the drivers ----------------------------------------------------------------------------

WorkerRing::WorkerRing(UringEngine& engine, Ring& ring, int index, std::size_t max_batch)
    : engine_(engine), ring_(ring), index_(index), events_(2 * max_batch), fired_(max_batch) {}

bool WorkerRing::wait(std::int64_t timeout_ns) noexcept {
  reaped_ = engine_.wait_in_ring(*this, timeout_ns);
  return reaped_ > 0;
}

void WorkerRing::dispatch() noexcept {
  const std::size_t n = reaped_;
  reaped_ = 0;
  engine_.deliver({events_.data(), n}, /*keep_first=*/true);
  leave_hand();  // queued now: the scheduler's idle() sees them
}

void WorkerRing::leave_hand() noexcept {
  if (!in_hand_) return;
  in_hand_ = false;
  engine_.rings_in_hand_.fetch_sub(1, std::memory_order_seq_cst);
}

bool WorkerRing::pending() const noexcept {
  // Relaxed loads: a hint, read again properly by the wait(0) a yes leads to; a request pushed
  // a moment ago is seen at the next look, or its pusher wakes us if we sleep.
  if (ring_.incoming.load(std::memory_order_relaxed) != nullptr) return true;
  // Deferred (or cooperative) task work waits for our next entry into the kernel.
  if (IO_URING_READ_ONCE(*ring_.ring.sq.kflags) & IORING_SQ_TASKRUN) return true;
  if (io_uring_cq_ready(&ring_.ring) > 0) return true;
  // Every ring's look catches a due timer, not only the watcher's: the watcher may be the one
  // running a long item while nobody sleeps. The clock is read only while timers are pending.
  const std::int64_t next = engine_.timer_queue().earliest();
  return next != kNever && next <= now_ns();
}

void WorkerRing::unpark() noexcept {
  // seq_cst store, then the seq_cst load of `sleeping` in wake_if_sleeping: pairs with the
  // owner's store of `sleeping` then load of `unparked` in wait_in_ring (a Dekker pair).
  ring_.unparked.store(true, std::memory_order_seq_cst);
  Ring::wake_if_sleeping(&ring_);
}

sched::WorkerDriver* WorkerRings::open(std::size_t worker) noexcept {
  return engine_.open_ring(worker);
}

void WorkerRing::before_blocking() noexcept {
  engine_.lend(*this);
}

void WorkerRing::after_blocking() noexcept {
  engine_.reclaim(*this);
}

void WorkerRings::close(std::size_t, sched::WorkerDriver& driver) noexcept {
  engine_.close_ring(static_cast<WorkerRing&>(driver));
}

// --- the engine's side ----------------------------------------------------------------------

WorkerRing* UringEngine::open_ring(std::size_t index) noexcept {
  if (index >= rings_.size()) return nullptr;  // not a worker slot of this engine's scheduler
  Ring& r = *rings_[index];
  if (r.state.load(std::memory_order_acquire) != Ring::State::unopened)
    return nullptr;  // retired: a ring is opened once (its sockets got -ECANCELED since)
  // A spare's ring is made now, by the spare (init() made the workers' rings). If that fails
  // (descriptors or memory short, maybe for a moment), the ring stays unopened, so it takes no
  // socket and is never lent to, and the spare parks on a futex and tries again each time it
  // parks (PerWorkerParking::park()): a spare that failed once still watches the timers later
  // (BlockingRegionTest.ASpareWhoseRingFailedOnceWatchesTimersOnceDescriptorsAreBack).
  if (r.spare) {
    if (auto e = set_up(r)) {
      if (r.initialised) io_uring_queue_exit(&r.ring);
      r.initialised = false;
      if (!r.setup_failed_logged) {
        r.setup_failed_logged = true;
        log::warn(
            "io_uring: spare worker {}'s ring cannot be set up ({}); it parks on a futex and "
            "tries again whenever it parks",
            index, e.message());
      }
      return nullptr;
    }
  }
  std::error_code failed;
  if (!r.initialised) failed = std::make_error_code(std::errc::bad_file_descriptor);
  if (!failed) failed = r.enable();  // this worker becomes its one issuer
  Ring::State expected = Ring::State::unopened;
  if (failed ||
      !r.state.compare_exchange_strong(expected, Ring::State::open, std::memory_order_seq_cst)) {
    if (failed)
      log::error(
          "io_uring: worker {}'s ring cannot be set up or enabled ({}); the worker parks on a "
          "futex and its sockets' operations complete with ECANCELED",
          index, failed.message());
    if (r.initialised) io_uring_queue_exit(&r.ring);
    r.initialised = false;
    r.state.store(Ring::State::retired, std::memory_order_seq_cst);
    finish_retired(r);
    return nullptr;
  }
  log::debug("io_uring: worker {}'s ring: {}", index, r.setup_name);
  this_thread_ring = &r;
  return worker_ring_drivers_[index].get();
}

void UringEngine::reap_until_zero(WorkerRing& w, const std::size_t& left, const char* what,
                                  bool finish_queue) noexcept {
  Ring& r = w.ring_;
  const std::size_t k = options().max_batch;
  while (left > 0) {
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec ts = sync::to_timespec<__kernel_timespec>(kCloseWaitNs);
    const int e = io_uring_submit_and_wait_timeout(&r.ring, &cqe, 1, &ts, nullptr);
    if (wait_failed(e)) {
      log::error("io_uring: worker {}'s ring, {}: waiting failed ({}); {} abandoned", w.index_,
                 what, std::strerror(-e), left);
      return;
    }
    const std::size_t n = reap_cqes(r, {w.events_.data(), k});
    if (n == 0 && e == -ETIME)
      log::warn("io_uring: worker {}'s ring, {}: {} still", w.index_, what, left);
    deliver({w.events_.data(), n});
    if (finish_queue) finish_retired(r);
  }
}

std::size_t UringEngine::wait_in_ring(WorkerRing& w, std::int64_t requested_ns) noexcept {
  Ring& r = w.ring_;
  const int self = w.index_;
  const std::size_t k = options().max_batch;
again:
  std::int64_t timeout_ns = requested_ns;
  post_wake_read(r);
  // Drain requests; announce sleep; drain again if something arrived meanwhile (the Dekker
  // pairs with pushers on `incoming` and with unpark() on `unparked`).
  for (;;) {
    if (r.unparked.exchange(false, std::memory_order_seq_cst)) timeout_ns = 0;
    drain(r);
    r.buffers.publish();  // buffers workers gave back, before the kernel needs them
    if (timeout_ns == 0) break;
    r.sleeping.store(true, std::memory_order_seq_cst);
    if (r.incoming.load(std::memory_order_seq_cst) == nullptr &&
        !r.unparked.load(std::memory_order_seq_cst))
      break;
    r.sleeping.store(false, std::memory_order_relaxed);
  }
  bool watching = false;
  TimerPlan::Wait plan;
  if (timeout_ns != 0 && timer_watch_.take(self, [this](int i) { return ring_asleep(i); })) {
    // The watcher sleeps towards the earliest deadline (timer_plan.hpp); a timer added later
    // with an earlier one gets Added::queued_earliest, and earlier_deadline() unparks us.
    watching = true;
    plan = timer_plan().before_wait(timeout_ns, clock_paused() && scheduler().idle());
    timeout_ns = plan.timeout_ns;
  }
  if (io_uring_sq_ready(&r.ring) > 0) submits_.fetch_add(1, std::memory_order_relaxed);
  int e;
  if (timeout_ns == 0) {
    e = io_uring_submit_and_get_events(&r.ring);  // runs deferred task work, waits for nothing
  } else {
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec ts = sync::to_timespec<__kernel_timespec>(timeout_ns);
    e = io_uring_submit_and_wait_timeout(&r.ring, &cqe, 1, timeout_ns > 0 ? &ts : nullptr, nullptr);
  }
  // seq_cst: ordered before the watch's release below (see timer_watch.hpp).
  r.sleeping.store(false, std::memory_order_seq_cst);
  // A paused clock jumps only when nothing is left to run, and what this ring reaps or pops
  // below is not in any queue until dispatch(): count the ring as holding work until then, so
  // another ring's watcher does not jump the clock past a timer popped here and not yet run.
  if (clock_paused()) {
    rings_in_hand_.fetch_add(1, std::memory_order_seq_cst);
    w.in_hand_ = true;
  }
  if (wait_failed(e)) log::error("io_uring wait failed: {}", std::strerror(-e));
  std::size_t n = reap_cqes(r, {w.events_.data(), k});
  // Handed the watch while asleep (hand_over_timer_watch() woke us for it) and woken for
  // nothing else: sleep again, towards the deadline now, rather than give the watch up and
  // pass it on, which would wake yet another sleeper for the same hand-over.
  const bool handed = r.rearm.exchange(false, std::memory_order_seq_cst);
  if (handed && !watching && n == 0 && requested_ns < 0 && !w.in_hand_ &&
      timer_watch_.holder() == self) {
    count_wait(0);
    goto again;
  }
  const bool released = release_timer_watch(self);
  // A paused clock may jump, as EngineCore::reap() lets poller 0's: quiet is also no other ring
  // between its reap and its dispatch, and nothing ready in any ring.
  if (watching && plan.deadline != kNever) {
    if (n == 0)
      timer_plan().after_empty_wait(plan, [&] {
        return rings_in_hand_.load(std::memory_order_seq_cst) == (w.in_hand_ ? 1 : 0) &&
               scheduler().idle() && !completions_ready();
      });
    else
      timer_plan().reaped();
  }
  // The watcher asks the queue itself (under its lock); others trust the hint.
  if (watching || timer_queue().earliest() != kNever) {
    const std::int64_t now = now_ns();
    if (watching || timer_queue().earliest() <= now)
      n += take_expired_timers(now, std::span(w.events_).subspan(n, k), w.fired_);
  }
  // Under the queue's lock, not the relaxed hint: an add that saw us as the holder (and so only
  // unparked us, awake) is ordered by the lock before or after our release; before, we see its
  // timer here; after, it saw the watch free and looked for a sleeper itself. The hint alone is
  // a store-buffering pair with that add's holder load, which weak memory may let both miss.
  if (released && timer_queue().size() != 0) hand_over_timer_watch(self + 1, false);
  count_wait(n);
  if (n == 0) w.leave_hand();
  return n;
}

void UringEngine::earlier_deadline() noexcept {
  if (options().io_mode != IoMode::rings) {
    wake(0);
    return;
  }
  const int holder = timer_watch_.holder();
  if (holder != TimerWatch::kNone) {
    worker_ring_drivers_[static_cast<std::size_t>(holder)]->unpark();
    return;
  }
  // No holder: a sleeper, if any, gets the watch (with none, the next one to sleep takes it,
  // and the busy owners' looks catch the deadline meanwhile).
  hand_over_timer_watch(0, true);
}

bool UringEngine::release_timer_watch(int self) noexcept {
  if (timer_watch_.holder() != self) return false;
  // Disarmed first: once the watch is free, every add must look for a sleeper (timer_watch.hpp).
  timer_queue().disarm();
  return timer_watch_.release(self);
}

void UringEngine::hand_over_timer_watch(int first, bool all) noexcept {
  const int rings = static_cast<int>(rings_.size());
  const int next = timer_watch_.hand_over(first, all ? rings : rings - 1, rings,
                                          [this](int i) { return ring_asleep(i); });
  if (next == TimerWatch::kNone) return;
  // Woken to sleep again towards the deadline, not unparked: nothing else is asked of it
  // (wait_in_ring() keeps the watch and sleeps again). Asleep no longer, it will release the
  // watch on its way back and hand it on as any holder does.
  Ring& r = *rings_[static_cast<std::size_t>(next)];
  r.rearm.store(true, std::memory_order_seq_cst);
  Ring::wake_if_sleeping(&r);
}

void UringEngine::close_ring(WorkerRing& w) noexcept {
  Ring& r = w.ring_;
  // Retired before the queue is taken (kick() says why); from now on nothing prepares an SQE
  // for an operation on this ring, so what the walk below cancels is all there is.
  r.state.store(Ring::State::retired, std::memory_order_seq_cst);
  this_thread_ring = nullptr;  // our own requests now go through kick() too
  finish_retired(r);
  pool_.for_each([&](UringDescriptor& d) {
    std::lock_guard guard(d.lock);
    if (d.poller != w.index_) return;
    for (Operation* op : d.slot) {
      if (op == nullptr || state_of<UringOp>(*op).parked) continue;  // parked: no SQE
      io_uring_sqe* sqe = r.get_sqe();
      io_uring_prep_cancel(sqe, op, 0);
      io_uring_sqe_set_data64(sqe, kIgnore);
    }
    if (d.multishot_armed && !d.throttled) stop_multishot(r, d);
  });
  if (r.wake_read_posted) {
    io_uring_sqe* sqe = r.get_sqe();
    io_uring_prep_cancel64(sqe, kWakeRead, 0);
    io_uring_sqe_set_data64(sqe, kIgnore);
  }
  // Requests that completions on other workers queue meanwhile are finished after each reap.
  reap_until_zero(w, r.in_flight, "closing, requests in the kernel", /*finish_queue=*/true);
  // The timer watch goes to a ring still sleeping, if this one held it.
  if (release_timer_watch(w.index_) && timer_queue().size() != 0)  // locked: see wait_in_ring
    hand_over_timer_watch(w.index_ + 1, false);
  // The ring itself is exited by ~Ring, with the engine: nothing is in flight in it any more,
  // and other threads may still read its mapped flags and queue heads (completions_ready()).
}

bool UringEngine::completions_ready() const noexcept {
  const bool rings_mode = options().io_mode == IoMode::rings;
  for (const auto& p : rings_) {
    const Ring& r = *p;
    if (r.incoming.load(std::memory_order_seq_cst) != nullptr) return true;
    if (rings_mode) {
      // Set up (a spare's by its owner) and mapped: opened and not failed. Acquire: pairs with
      // open_ring()'s seq_cst store of `open` after the set-up.
      const Ring::State state = r.state.load(std::memory_order_acquire);
      if (state != Ring::State::open && state != Ring::State::lent) continue;
    }
    // Task work waits for the ring's owner (rings: deferred, flagged), or CQEs for a reaper.
    if (IO_URING_READ_ONCE(*r.ring.sq.kflags) & IORING_SQ_TASKRUN) return true;
    if (__atomic_load_n(r.ring.cq.ktail, __ATOMIC_ACQUIRE) !=
        __atomic_load_n(r.ring.cq.khead, __ATOMIC_ACQUIRE))
      return true;
  }
  return false;
}

void UringEngine::on_drivers_detached() noexcept {
  for (std::size_t i = 0; i < rings_.size(); ++i) {
    Ring& r = *rings_[i];
    Ring::State expected = Ring::State::unopened;
    if (r.state.compare_exchange_strong(expected, Ring::State::retired,
                                        std::memory_order_seq_cst)) {
      finish_retired(r);  // never opened: what waits in its queue completes now
    } else if (expected == Ring::State::open || expected == Ring::State::lent) {
      log::error("io_uring: worker {}'s ring is still open after the drivers were detached", i);
    }
  }
}

void UringEngine::finish_retired(Ring& r) noexcept {
  // seq_cst: the other half of kick()'s pair (see there).
  r.take_each(std::memory_order_seq_cst, [&](Request& request) {
    switch (request.kind) {
      case RequestKind::start:
        finish_refused(*static_cast<Operation*>(request.owner));
        break;
      case RequestKind::cancel_read:
      case RequestKind::cancel_write:
      case RequestKind::arm: {
        // A reader parked for a multishot operation that will not run (arm) or that it asked
        // to leave (cancel) completes now; one with an SQE in flight completes when the owner's
        // close cancels it.
        auto& d = *static_cast<UringDescriptor*>(request.owner);
        Operation* claimed = nullptr;
        {
          std::lock_guard guard(d.lock);
          Operation* op = parked(d);
          if (request.kind == RequestKind::arm) {
            d.arm_queued = false;
            if (d.multishot_armed) op = nullptr;
          } else {
            const int side = request.kind == RequestKind::cancel_read ? 0 : 1;
            d.cancel_queued[side] = false;
            if (side != 0 ||
                (op != nullptr && !op->cancel_requested.load(std::memory_order_relaxed)))
              op = nullptr;
          }
          if (op != nullptr) d.slot[0] = nullptr;
          claimed = op;
        }
        if (claimed != nullptr) deliver_claimed(*claimed, -ECANCELED);
        break;
      }
      case RequestKind::close:
        close_now(nullptr, *static_cast<UringDescriptor*>(request.owner));
        break;
    }
  });
}

}  // namespace arbor::io::uring
