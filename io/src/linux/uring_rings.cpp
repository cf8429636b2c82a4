// UringEngine, rings mode (IoMode::rings): a ring per scheduler worker, each worker parked in
// its own (WorkerRing, a sched::WorkerDriver; WorkerRings opens and closes them).
//
// Invariants, on top of uring_engine.hpp's:
// - A ring is created, submitted to, reaped and exited only on its owner's thread (the worker
//   that opened it): it is single-issuer where the kernel allows, so no other thread may even
//   submit. Everyone else reaches it through its request queue (`Ring::incoming`), and wakes
//   the owner only if it announced sleep; the owner's own requests wait in the queue until its
//   next look or sleep, which drains and submits them in the same io_uring_enter that reaps.
// - Sockets are spread over the rings round-robin at attach, skipping retired and lent rings.
//   A ring not opened yet keeps its requests queued: its worker opens it at its next loop pass.
// - A worker entering a BlockingRegion lends its ring (lend()): the ring takes no new socket,
//   its sockets move to the other open rings (Descriptor::poller, changed under the socket's
//   lock, which every request push reads it under), what it had in flight for them is
//   cancelled and, if the kernel reports it cancelled, started again on the new ring
//   (move_on()); a multishot operation is stopped and its last CQE re-arms it there. The owner
//   reaps until nothing it cancelled is left in the ring (`Ring::moving` == 0) before it blocks,
//   so no operation is ever in two rings. Requests queued before a socket moved are forwarded
//   by drain(); bytes a multishot receive buffered stay with the socket, and their buffers go
//   back to the ring that lent them (UringDescriptor::chunk_ring). A connect in progress stays
//   (it cannot be made twice), and with no other open ring nothing moves.
// - Every ring is made by init() (disabled, if single-issuer: its worker enables it in
//   open(), becoming its one issuer), so a ring that cannot be made fails Engine::create().
// - Closing a ring (detach, or its worker exiting) retires it first, then, on the owner,
//   cancels everything it has in flight and reaps until nothing is (`Ring::in_flight` == 0)
//   before exiting it, so the kernel never writes into memory we gave back. Requests that reach
//   a retired ring are finished by whoever queued them, without the kernel: starts and waiting
//   readers complete with -ECANCELED, closes close the fd (finish_retired()).
// - Timers: the TimerQueue is shared. One sleeping ring holds the timer watch and sleeps
//   towards the earliest deadline (common/timer_watch.hpp says how it moves); any ring's wait
//   takes the timers due, and a busy owner's pending() says yes once one is. A paused (test)
//   clock jumps to the next deadline only from the watcher, with nothing to run and no ring
//   between its reap and its dispatch (`rings_in_hand_`): a timer popped by one ring is run
//   before another jumps the clock past it.
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <limits>

#include "arbor/io/clock.hpp"
#include "arbor/io/log.hpp"
#include "arbor/sync/timespec.hpp"
#include "common/timer_plan.hpp"
#include "common/timer_queue.hpp"
#include "linux/uring_engine.hpp"

namespace arbor::io::uring {
namespace {

constexpr std::int64_t kNever = TimerPlan::kNever;
// A closing ring waits this long at a time for what it cancelled, saying so if it must wait
// again (a request the kernel cannot cancel would otherwise hang the close silently).
constexpr std::int64_t kCloseWaitNs = 1'000'000'000;

}  // namespace

void Ring::kick() noexcept {
  wake_if_sleeping(this);
  // seq_cst, after the push (itself seq_cst): pairs with close_ring()'s store of `retired`
  // before its last take of the queue, so a request is finished by one side or the other.
  if (state.load(std::memory_order_seq_cst) == State::retired) engine->finish_retired(*this);
}

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
  // A spare's ring is made now, by the spare (init() made the workers' rings). If that fails,
  // the spare parks on a futex: it takes no socket and no timer watch.
  std::error_code failed = r.spare ? set_up(r) : std::error_code{};
  if (!failed && !r.initialised) failed = std::make_error_code(std::errc::bad_file_descriptor);
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

void UringEngine::place(UringDescriptor& d) noexcept {
  const std::size_t n = rings_.size();
  std::lock_guard guard(d.lock);
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = (static_cast<std::size_t>(d.poller) + k) % n;
    // Counted first, then the state read (both seq_cst), against lend()'s store of `lent`
    // then load of the count: either lend() sees the count and walks (finding the socket under
    // d.lock, which we hold until placed), or we see `lent` and go on.
    Ring& r = *rings_[i];
    r.sockets.fetch_add(1, std::memory_order_seq_cst);
    if (takes_sockets(r)) {
      d.poller.store(static_cast<int>(i), std::memory_order_relaxed);
      d.placed = true;
      return;
    }
    r.sockets.fetch_sub(1, std::memory_order_relaxed);
  }
  // No ring takes sockets: the engine is stopping (its operations complete with -ECANCELED), or
  // every worker blocks in a region and no spare could start. A lent ring then, whose worker
  // serves it when its region ends; the first guess if none is (it may be a spare's, never
  // opened: stop() finishes its queue).
  for (std::size_t k = 0; k < n; ++k)
    if (rings_[k]->state.load(std::memory_order_seq_cst) == Ring::State::lent) {
      d.poller.store(static_cast<int>(k), std::memory_order_relaxed);
      break;
    }
  ring_of(d).sockets.fetch_add(1, std::memory_order_relaxed);
  d.placed = true;
}

bool UringEngine::takes_sockets(const Ring& r) noexcept {
  // seq_cst: see place(). A worker's ring not opened yet takes them (its worker opens it at its
  // next pass); a spare's only once opened: a spare may never start.
  const Ring::State state = r.state.load(std::memory_order_seq_cst);
  return state == Ring::State::open || (state == Ring::State::unopened && !r.spare);
}

void UringEngine::lend(WorkerRing& w) noexcept {
  Ring& r = w.ring_;
  const std::size_t n = rings_.size();
  const auto is_open = [](const Ring& c) {
    return c.state.load(std::memory_order_seq_cst) == Ring::State::open;
  };
  Ring::State expected = Ring::State::open;
  // seq_cst, before the walk takes each descriptor's lock: see place(). Lent even when no other
  // ring is open to take the sockets (every other worker blocks and no spare could start): they
  // stay then, but place() puts no new one here
  // (BlockingRegionTest.WithNoSpareNewSocketsAvoidABlockedWorker).
  if (!r.state.compare_exchange_strong(expected, Ring::State::lent, std::memory_order_seq_cst))
    return;
  bool other = false;
  for (const auto& c : rings_)
    other = other || (c.get() != &r && is_open(*c));
  if (!other) {
    log::debug("io_uring: worker {} blocks: no other ring is open, {} socket(s) stay", w.index_,
               r.sockets.load(std::memory_order_relaxed));
    return;
  }
  std::size_t next = static_cast<std::size_t>(w.index_) + 1;
  std::size_t moved = 0;
  std::size_t stayed = 0;
  // The walk visits every descriptor of the engine: skipped when none is ours (see place()).
  if (r.sockets.load(std::memory_order_seq_cst) != 0)
    pool_.for_each([&](UringDescriptor& d) {
      std::lock_guard guard(d.lock);
      if (d.poller.load(std::memory_order_relaxed) != w.index_ || d.closed || !d.placed) return;
      // A connect in progress stays: cancelled, it could not be made again (connect(2) on a
      // connecting socket fails with EALREADY). It completes here, after the region.
      if (d.slot[1] != nullptr && d.slot[1]->kind == OpKind::connect) {
        ++stayed;
        return;
      }
      Ring* to = nullptr;
      for (std::size_t k = 0; k < n && to == nullptr; ++k, ++next) {
        Ring& c = *rings_[next % n];
        if (&c != &r && is_open(c)) to = &c;
      }
      if (to == nullptr) {  // the others were lent meanwhile
        ++stayed;
        return;
      }
      // From here on every request for the socket goes to `to` (they read the ring under
      // d.lock); those already queued here, drain() below forwards.
      d.poller.store(to->index, std::memory_order_relaxed);
      r.sockets.fetch_sub(1, std::memory_order_relaxed);
      to->sockets.fetch_add(1, std::memory_order_relaxed);
      ++moved;
      for (Operation* op : d.slot) {
        if (op == nullptr) continue;
        UringOp& state = state_of<UringOp>(*op);
        // Parked for the multishot operation (stopped below), or its start still queued here
        // (forwarded): no SQE of its own to cancel. Or still on its way out of the ring that
        // moved the socket here (moving): that ring restarts it wherever the socket is then.
        if (state.moving.load(std::memory_order_relaxed) ||
            !state.in_ring.load(std::memory_order_relaxed))
          continue;
        // Its CQE, if -ECANCELED, starts it again on `to` (move_on()).
        state.moving.store(true, std::memory_order_relaxed);
        ++r.moving;
        io_uring_sqe* sqe = r.get_sqe();
        io_uring_prep_cancel(sqe, op, 0);
        io_uring_sqe_set_data64(sqe, kIgnore);
      }
      if (d.multishot_armed && !d.moving) {  // moving: stopped by the ring it runs on, as above
        // Its last CQE re-arms it on `to` for a parked reader (on_multishot()); what it buffered
        // stays in the socket, its buffers going back to this ring as they are read.
        d.moving = true;
        ++r.moving;
        if (!d.throttled) stop_multishot(r, d);
      }
    });
  ring_moves_.fetch_add(moved, std::memory_order_relaxed);
  drain(r);  // requests queued before their sockets moved go on to the sockets' new rings
  // Wait for every cancelled operation, so that none of a moved socket is left in this ring
  // (its new ring starts it again). Bounded in practice: the kernel cancels a waiting socket
  // operation at once; one it cannot cancel completes on its own, and we say so while we wait.
  // If waiting fails, their CQEs, when they come, still move them (move_on()). What is reaped
  // is delivered from inside an item that blocks: to everyone.
  reap_until_zero(w, r.moving, "entering a blocking region, operations moving", [] {});
  if (io_uring_sq_ready(&r.ring) > 0) io_uring_submit(&r.ring);  // what drain() made for stayers
  log::debug("io_uring: worker {} blocks: {} socket(s) moved to other rings, {} stay", w.index_,
             moved, stayed);
}

void UringEngine::reclaim(WorkerRing& w) noexcept {
  Ring::State expected = Ring::State::lent;
  w.ring_.state.compare_exchange_strong(expected, Ring::State::open, std::memory_order_seq_cst);
}

template <class After>
void UringEngine::reap_until_zero(WorkerRing& w, const std::size_t& left, const char* what,
                                  After&& after) noexcept {
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
    after();
  }
}

bool UringEngine::move_on(Ring& r, Operation& op, int result) noexcept {
  if (result != -ECANCELED) return false;  // it finished before the cancel reached it
  auto& d = descriptor_of<UringDescriptor>(op);
  Ring* to;
  {
    std::lock_guard guard(d.lock);
    // Closed or cancelled since (that cancel went to the new ring and found nothing there):
    // cancelled is its true result.
    if (d.closed || op.cancel_requested.load(std::memory_order_relaxed) || cancelling())
      return false;
    to = &ring_of(d);
    if (to == &r) return false;
    to->push(state_of<UringOp>(op).start);  // the slot stays op's
  }
  to->kick();  // not notify(): the SubmitBatch around the blocking item may outlast the region
  return true;
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
    plan = timer_plan().before_wait(timeout_ns, scheduler().idle());
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
  // A paused clock may jump, as Engine::reap() lets poller 0's: quiet is also no other ring
  // between its reap and its dispatch, and nothing ready in any ring.
  if (watching && plan.deadline != kNever) {
    if (n == 0)
      timer_plan().after_empty_wait(
          plan, rings_in_hand_.load(std::memory_order_seq_cst) == (w.in_hand_ ? 1 : 0) &&
                    scheduler().idle() && !completions_ready());
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
  reap_until_zero(w, r.in_flight, "closing, requests in the kernel", [&] { finish_retired(r); });
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
  Request* fifo = r.take_in_order(std::memory_order_seq_cst);
  while (fifo != nullptr) {
    Request* request = fifo;
    fifo = fifo->next;
    switch (request->kind) {
      case RequestKind::start:
        finish_refused(*static_cast<Operation*>(request->owner));
        break;
      case RequestKind::cancel_read:
      case RequestKind::cancel_write:
      case RequestKind::arm: {
        // A reader parked for a multishot operation that will not run (arm) or that it asked
        // to leave (cancel) completes now; one with an SQE in flight completes when the owner's
        // close cancels it.
        auto& d = *static_cast<UringDescriptor*>(request->owner);
        Operation* claimed = nullptr;
        {
          std::lock_guard guard(d.lock);
          Operation* op = parked(d);
          if (request->kind == RequestKind::arm) {
            d.arm_queued = false;
            if (d.multishot_armed) op = nullptr;
          } else {
            const int side = request->kind == RequestKind::cancel_read ? 0 : 1;
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
        refuse_close(*static_cast<UringDescriptor*>(request->owner));
        break;
    }
  }
}

void UringEngine::refuse_close(UringDescriptor& d) noexcept {
  Handle fd = kInvalidHandle;
  bool release = false;
  Operation* claimed = nullptr;
  std::vector<Handle> orphans;  // accepted, never taken (close is not a hot path)
  {
    std::lock_guard guard(d.lock);
    d.close_queued = false;
    claimed = parked(d);
    if (claimed != nullptr) d.slot[0] = nullptr;
    // The buffers stay where they are: the ring that lent them is gone (or going).
    d.chunk_head = d.chunk_tail = ProvidedBuffers::kNone;
    d.chunk_count = 0;
    d.has_end = false;
    orphans.swap(d.accepted);
    orphans.erase(orphans.begin(), orphans.begin() + static_cast<std::ptrdiff_t>(d.accepted_head));
    d.accepted_head = 0;
    if (d.busy == 0 && !d.fd_closed) {
      d.fd_closed = true;
      fd = d.fd;
      release = d.idle();
    }
  }
  if (claimed != nullptr) deliver_claimed(*claimed, -ECANCELED);
  for (Handle h : orphans)
    close_handle(h);
  if (fd == kInvalidHandle) return;  // a worker is mid-send; it re-queues the close
  // An SQE still in the kernel that names fd holds its own reference to the file, so the
  // number may be reused at once: nothing will submit an SQE naming it again.
  close_handle(fd);
  if (release) pool_.release(&d);
  descriptors_.fetch_sub(1, std::memory_order_relaxed);  // after: see close_now()
}

}  // namespace arbor::io::uring
