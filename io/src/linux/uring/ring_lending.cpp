// UringEngine, rings mode: where a socket is placed, and how a worker entering a BlockingRegion
// lends its ring.
//
// - Sockets are spread over the rings round-robin at attach (place()), on rings that take them:
//   open ones, and a worker's ring not opened yet (its worker opens it at its next pass); not a
//   spare's until the spare opened it, nor a lent or retired one.
// - A worker entering a BlockingRegion lends its ring (lend()): the ring takes no new socket,
//   its sockets move to the other open rings (Descriptor::poller, changed under the socket's
//   lock, which every request push reads it under), what it had in flight for them is
//   cancelled and, if the kernel reports it cancelled, started again on the new ring
//   (move_on()); a multishot operation is stopped and its last CQE re-arms it there. The owner
//   reaps until nothing it cancelled is left in the ring (`Ring::moving` == 0) before it blocks,
//   so no operation is ever in two rings. Requests queued before a socket moved are forwarded
//   by drain(); bytes a multishot receive buffered stay with the socket, and their buffers go
//   back to the ring that lent them (UringDescriptor::chunk_ring).
// - What stays: a connect in progress (it cannot be made twice), and everything when no other
//   ring is open. The scheduler makes that rare: a region that finds no sleeper to wake starts a
//   spare, and waits for the spare to open its ring before it lends (Scheduler::enter_blocking),
//   so only with every worker and every allowed spare blocked does a lent ring keep its sockets
//   (BlockingRegionTest.WithNoSpareNewSocketsAvoidABlockedWorker: even then new ones avoid it).
#include "arbor/internal/log.hpp"
#include "linux/uring/engine.hpp"

namespace arbor::io::uring {

void UringEngine::place(UringDescriptor& d) noexcept {
  const std::size_t n = rings_.size();
  std::lock_guard guard(d.lock);
  // Counted first, then the state read (both seq_cst), against lend()'s store of `lent` then
  // load of the count: either lend() sees the count and walks (finding the socket under d.lock,
  // which we hold until placed), or we see `lent` and go on.
  const auto try_ring = [&](std::size_t i) {
    Ring& r = *rings_[i];
    r.sockets.fetch_add(1, std::memory_order_seq_cst);
    if (!takes_sockets(r)) {
      r.sockets.fetch_sub(1, std::memory_order_relaxed);
      return false;
    }
    d.poller.store(static_cast<int>(i), std::memory_order_relaxed);
    d.placed = true;
    return true;
  };
  // Round-robin over the rings that take sockets: each try takes the next slot, so a slot
  // that refuses (a spare not started, most often) passes its turn on to no ring in
  // particular. Walking on from the refused slot gave its turns to the ring after it: with
  // the default spares, ring 0 took three sockets in four.
  std::size_t last = 0;
  for (std::size_t k = 0; k < n; ++k) {
    last = next_place_.fetch_add(1, std::memory_order_relaxed);
    if (try_ring(last % n)) return;
  }
  // Those n slots need not have been n different rings: other threads placing at the same time
  // take slots between ours, and ours may all have been spares' (the one open ring's turns went
  // to the others). Then every ring is asked once, in order, from where our turns stopped. Before
  // this walk such a socket went to a spare's ring that never opened, and its requests waited
  // there for good (UringRings.ConcurrentAttachesNeverLandOnASparesRing).
  for (std::size_t k = 1; k <= n; ++k)
    if (try_ring((last + k) % n)) return;
  // No ring took it: the engine is stopping (its operations complete with -ECANCELED), or every
  // worker blocked in a region while we asked and no spare could start. A lent ring then, whose
  // worker serves it when its region ends; else ring 0, a worker's (never a spare's, which may
  // never open): open again (its region ended after we asked), lent, or retired (kick()
  // finishes what is queued for it). The first guess adopt() made could be a spare's
  // (UringRings.ARingReclaimedWhilePlacingIsNotPassedOverForASparesRing).
  std::size_t pick = 0;
  for (std::size_t k = 0; k < n; ++k)
    if (rings_[k]->state.load(std::memory_order_seq_cst) == Ring::State::lent) {
      pick = k;
      break;
    }
  d.poller.store(static_cast<int>(pick), std::memory_order_relaxed);
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
    // What we queued (a send, say) goes to the kernel now: nothing submits to a lent ring
    // before its region ends (UringRings.ASendAroundARegionGoesOutDuringIt).
    drain(r);
    if (io_uring_sq_ready(&r.ring) > 0) {
      submits_.fetch_add(1, std::memory_order_relaxed);
      io_uring_submit(&r.ring);
    }
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
      // Counted on the candidate first, then its state read (both seq_cst), as place() does and
      // for the same reason: a candidate lent at this moment either sees the count and walks
      // (after ours: both walks hold the pool's lock), finding the socket, or we see `lent`.
      Ring* to = nullptr;
      for (std::size_t k = 0; k < n && to == nullptr; ++k, ++next) {
        Ring& c = *rings_[next % n];
        if (&c == &r) continue;
        c.sockets.fetch_add(1, std::memory_order_seq_cst);
        if (is_open(c))
          to = &c;
        else
          c.sockets.fetch_sub(1, std::memory_order_relaxed);
      }
      if (to == nullptr) {  // the others were lent meanwhile
        ++stayed;
        return;
      }
      // From here on every request for the socket goes to `to` (they read the ring under
      // d.lock); those already queued here, drain() below forwards.
      d.poller.store(to->index, std::memory_order_relaxed);
      r.sockets.fetch_sub(1, std::memory_order_relaxed);
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
  reap_until_zero(w, r.moving, "entering a blocking region, operations moving", false);
  if (io_uring_sq_ready(&r.ring) > 0) io_uring_submit(&r.ring);  // what drain() made for stayers
  log::debug("io_uring: worker {} blocks: {} socket(s) moved to other rings, {} stay", w.index_,
             moved, stayed);
}

void UringEngine::reclaim(WorkerRing& w) noexcept {
  Ring::State expected = Ring::State::lent;
  w.ring_.state.compare_exchange_strong(expected, Ring::State::open, std::memory_order_seq_cst);
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

}  // namespace arbor::io::uring
