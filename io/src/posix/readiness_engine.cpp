// ReadinessEngine: the readiness protocol, written once for every readiness poller (epoll,
// kqueue; posix/readiness_poller.hpp). Why it is built this way, and what it was measured
// against, is in docs/architecture.md ("The readiness engines"); this file keeps these
// invariants:
// - Each socket is watched once, edge-triggered, for both directions; an operation that would
//   block waits in its descriptor's slot, and a readiness report turns it into a retry that a
//   worker runs.
// - No lost edge: an attempt parks only if its side's readiness generation (ReadyDescriptor,
//   bumped by the poller under the descriptor lock) is the one it started under.
// - A batch never exceeds K: one report may yield two retries, so a wait asks for
//   ceil(room / 2) reports and carries at most one retry to the next wait.
// - A report that reaches a recycled descriptor only bumps a readiness generation: at worst
//   one spurious retry that finds EAGAIN.
// - No call known to find EAGAIN: a stream's receive that got fewer bytes than it asked for
//   emptied the socket, so the next receive or readable wait parks without a system call while
//   no report has come for the read side since that receive began (the saving is a call per
//   request for a server: tests/io/drained_receive_test.cpp).
// - Close means closed (common/descriptor.hpp): a close that finds a worker in a call on the fd,
//   or a retry pending for it, shuts the socket's read side down at once (a listener stops
//   listening); a read-side call's result then counts as cancelled, a send's stands. The
//   poller stops watching an fd before it is closed (ReadinessPoller::remove).
#include "posix/readiness_engine.hpp"

#include <cerrno>
#include <vector>

#include "arbor/internal/log.hpp"
#include "arbor/io/submit_batch.hpp"
#include "common/descriptor.hpp"
#include "common/engine_core.hpp"
#include "common/engine_table.hpp"
#include "common/operation_state.hpp"
#include "posix/socket_calls.hpp"

namespace arbor::io {
namespace {

// The readiness generation of each side: bumped by every report for that side. And a socket
// error a poller took from the socket (Readiness::taken_error), until a call reports it.
// `stream` and `drained`: see note_drained().
struct ReadyDescriptor : Descriptor {
  std::uint32_t seq[2] = {0, 0};
  int taken_error = 0;
  bool stream = false;          // a stream socket (attach_stream, or attach() of a SOCK_STREAM one)
  bool drained = false;         // a short receive emptied it, as of read generation `drained_seq`
  bool stays_readable = false;  // a report said so (Readiness::stays_readable): never drained
  std::uint32_t drained_seq = 0;
  std::uint64_t skipped = 0;  // calls known_empty() saved, over every socket it served (no reset)
  void reset(Handle handle, int owner) noexcept {
    Descriptor::reset(handle, owner);
    seq[0] = seq[1] = 0;
    taken_error = 0;
    stream = drained = stays_readable = false;
  }
};

// Under d's lock, after op's call returned r, the call having begun under read generation
// `seq`: a stream socket's receive that got fewer bytes than it asked for (and more than none)
// took all the bytes the socket held, so the socket is empty as of `seq`. Any byte, end or
// error that arrives after the call began is an edge the poller reports, and that report bumps
// seq[0]: while seq[0] is still `seq`, a receive would find EAGAIN.
// What a short receive leaves readable is excluded: the peer's end or an error that arrived
// (and was reported) before the call, and bytes behind a TCP urgent mark, where a receive stops
// short. A report of any of them sets `stays_readable` for good (epoll: EPOLLRDHUP, EPOLLERR,
// EPOLLPRI; kqueue: the read filter's EV_EOF): the rule is then off for the socket. (Proved by
// DrainedReceive.AnEndReportedWithTheLastBytesIsNotSkipped and .BytesBehindAnUrgentMarkArrive,
// which hang without it; the race with a report during the call by
// ShortReceiveRace.BytesArrivingAroundAShortReceiveAreNeverLost.)
// Not for datagrams (a short one says nothing of the next) nor a receive of nothing.
// (A Unix stream receive also stops short after bytes that carried descriptors, SCM_RIGHTS,
// which arbor never sends: a peer that sends them stalls its own connection until it sends
// more, as a readiness wait could not tell either.)
void note_drained(ReadyDescriptor& d, const Operation& op, std::int64_t r,
                  std::uint32_t seq) noexcept {
  if (!d.stream || op.kind != OpKind::receive || r <= 0) return;
  // A full receive clears it: the 32-bit generation could otherwise come round to drained_seq.
  d.drained = static_cast<std::uint64_t>(r) < op.size;
  d.drained_seq = seq;
}

// Under d's lock: whether op, about to start, would find EAGAIN for sure (note_drained()), so
// it may park at once. Not with an error a poller took from the socket: a call reports it.
bool known_empty(const ReadyDescriptor& d, const Operation& op) noexcept {
  return ((op.kind == OpKind::receive && op.size > 0) || op.kind == OpKind::readable) &&
         d.drained && d.drained_seq == d.seq[0] && d.taken_error == 0 && !d.stays_readable;
}

// Whether a call's result `r` is what the socket gives once its pending error was taken away
// (Readiness::taken_error), so that error is the true result: a connect that now looks done, a
// receive that finds the end or nothing, a send that finds the pipe broken or no room. Not an
// accept (a listener's error is not its connections') nor a readable wait (its answer, "a
// receive would not wait", stands; the receive after it reports the error).
bool hides_taken_error(OpKind kind, std::int64_t r) noexcept {
  switch (kind) {
    case OpKind::connect:
    case OpKind::receive:
    case OpKind::receive_from:
      return r == 0 || r == -EAGAIN;
    case OpKind::send:
    case OpKind::send_vectored:
    case OpKind::send_to:
      return r == -EPIPE || r == -EAGAIN;
    case OpKind::accept:
    case OpKind::readable:
      break;
  }
  return false;
}

// A poller's token for a descriptor: its address, tagged in the bits its alignment leaves zero
// with the low bits of the generation it was registered under. A report harvested before a close
// may reach the descriptor after the pool gave it to the next socket; the tag tells it apart
// (unless the descriptor was recycled a multiple of kTagMask + 1 times meanwhile), so what the
// report says about the old socket (the error a poller took from it) is not pinned on the new.
constexpr std::uintptr_t kTagMask = alignof(ReadyDescriptor) - 1;
static_assert(alignof(ReadyDescriptor) >= 8, "three tag bits, at least");

void* token_of(ReadyDescriptor* d) noexcept {
  return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(d) | (d->generation & kTagMask));
}

// Per operation: the readiness generation its next attempt starts under, connect's progress,
// and a link for cancel_parked()'s chain.
struct ReadyOp {
  std::uint32_t ready_seq = 0;
  bool connect_started = false;
  Operation* next = nullptr;
};

class ReadinessEngine final : public EngineCore {
 public:
  ReadinessEngine(const char* name, sched::Scheduler& scheduler, const EngineOptions& options)
      : EngineCore(scheduler, options),
        name_(name),
        pollers_(static_cast<std::size_t>(poll_sets(options))) {}

  std::error_code init(MakeReadinessPoller make) {
    const std::size_t capacity = (options().max_batch + 1) / 2;  // see wait()
    for (auto& p : pollers_) {
      auto made = make(capacity);
      if (!made) return made.error();
      p.poller = std::move(*made);
      p.reports.resize(capacity);
    }
    return start_polling();
  }

  ~ReadinessEngine() override {
    // The pollers are stopped (by the owner's deleter, engine.hpp). Sockets still open now were
    // never closed by their owners: the engine owns their descriptors, so it closes them
    // (removing each from its poller first, as every close does).
    descriptors_pool_.for_each([this](Descriptor& d) {
      std::lock_guard guard(d.lock);
      if (d.fd_closed || d.fd == kInvalidHandle) return;
      poller_of(d).remove(d.fd);
      if (d.close_if_open()) descriptors_.fetch_sub(1, std::memory_order_relaxed);
    });
  }

  const char* name() const noexcept override { return name_; }

  Result<DescriptorRef> attach(Handle handle) noexcept override {
    if (int e = posix::make_non_blocking(handle); e != 0) {
      close_handle(handle);
      return errno_code(e);
    }
    return adopt(handle, posix::is_stream(handle));
  }

  Result<DescriptorRef> attach_stream(Handle handle) noexcept override {
    return adopt(handle, true);
  }

  // attach()'s and attach_stream()'s common part, for a non-blocking socket; `stream`: a
  // stream socket (note_drained()).
  Result<DescriptorRef> adopt(Handle handle, bool stream) noexcept {
    auto adopted = descriptors_pool_.adopt(handle, pollers_.size());
    if (!adopted) return adopted;
    auto* d = static_cast<ReadyDescriptor*>(adopted->descriptor);
    // No lock: no name for this socket exists yet, and a stale report reaching the descriptor
    // touches only seq[] and taken_error. Whoever starts an operation got the name from us.
    d->stream = stream;
    Poller& p = pollers_[static_cast<std::size_t>(d->poller.load(std::memory_order_relaxed))];
    // Release: publishes the descriptor's reset (and the pool's allocation of it) to the
    // thread that will get its pointer back from the poller's wait; see wait().
    p.registrations.fetch_add(1, std::memory_order_release);
    if (const int e = p.poller->add(handle, token_of(d)); e != 0) {
      close_handle(handle);
      {
        std::lock_guard guard(d->lock);
        d->closed = d->fd_closed = true;  // never named: nothing may close this fd number again
      }
      descriptors_pool_.release(d);
      return errno_code(e);
    }
    descriptors_.fetch_add(1, std::memory_order_relaxed);
    return adopted;
  }

  bool start(Operation& op) noexcept override {
    auto& d = descriptor_of<ReadyDescriptor>(op);
    // The descriptor lock is taken twice per start, here and in attempt() after the system
    // call, and that stays: the call runs between the two, outside the lock. Before it, under
    // the lock: admission (a stale name or a closed socket must not reach the fd number, which
    // may serve another socket by now), the `busy` pin that keeps the fd open through the call,
    // and the readiness generation the attempt starts under. After it, under the lock: the
    // park, checked against that generation (an edge that arrived during the call means try
    // again, not sleep: the no-lost-edge rule), or the unpin and a close that waited for it.
    // One lock would need either the call inside it, so that the reaper (in workers mode a
    // worker holding the poll right, mid-batch), the socket's other side and a close would
    // wait out a send's copy, contended and asleep on the futex, where an uncontended second
    // lock costs two atomic operations; or a lock-free pin on Descriptor (an atomic `busy`
    // against `closed` and reset()'s recycling, shared with io_uring's sends), which is a
    // redesign of the descriptor protocol for those same two operations.
    {
      std::lock_guard guard(d.lock);
      // Admitted first: an operation refused as busy may be the one pending, whose state must
      // not be reset under it.
      if (!admit(d, op, cancelling())) return true;
      const int side = Descriptor::side(op.kind);
      emplace_state<ReadyOp>(op).ready_seq = d.seq[side];
      if (known_empty(d, op)) {  // parks as attempt() would after the EAGAIN it would get
        ++d.skipped;
        d.slot[side] = &op;
        return false;
      }
      ++d.busy;
    }
    return attempt(op);
  }

  std::int64_t receive_now(Operation& op) noexcept override {
    auto& d = descriptor_of<ReadyDescriptor>(op);
    std::uint32_t seq;
    {
      std::lock_guard guard(d.lock);
      if (!admit(d, op, cancelling())) return op.result;
      if (known_empty(d, op)) {
        ++d.skipped;
        return -EAGAIN;
      }
      ++d.busy;  // the same pin as start(): the fd stays open through the call
      seq = d.seq[Descriptor::side(op.kind)];
    }
    std::int64_t r = posix::perform(op, d.fd);
    Descriptor::Finish finish;
    {
      std::lock_guard guard(d.lock);
      if (d.taken_error != 0 && hides_taken_error(op.kind, r)) r = -std::exchange(d.taken_error, 0);
      note_drained(d, op, r, seq);
      --d.busy;
      finish = d.finish_if_closed();
    }
    finish_close(&d, finish);
    return r;
  }

  void cancel(Operation& op) noexcept override {
    auto& d = descriptor_of<ReadyDescriptor>(op);
    const int side = Descriptor::side(op.kind);
    bool parked = false;
    Descriptor::Finish finish;
    {
      std::lock_guard guard(d.lock);
      // A retry in flight sees the flag under the lock before it would park again.
      op.cancel_requested.store(true, std::memory_order_relaxed);
      if (d.generation == op.generation && d.slot[side] == &op) {
        d.slot[side] = nullptr;
        parked = true;
        finish = d.finish_if_closed();
      }
    }
    finish_close(&d, finish);
    if (parked) complete_later(op, -ECANCELED);
  }

  void close(DescriptorRef socket) noexcept override {
    Descriptor* d = socket.descriptor;
    Operation* parked[2];
    Descriptor::Finish finish;
    {
      std::lock_guard guard(d->lock);
      if (d->closed || d->generation != socket.generation) return;
      d->closed = true;
      parked[0] = std::exchange(d->slot[0], nullptr);
      parked[1] = std::exchange(d->slot[1], nullptr);
      finish = d->finish_if_closed();
      // A worker is in a system call on the fd, or holds a retry for it that may run much
      // later: the fd is closed when it lets go, but the socket ends now (descriptor.hpp).
      if (finish.close_fd == kInvalidHandle && !d->fd_closed)
        posix::shut_down_for_close(d->fd, d->busy != 0);
    }
    finish_close(d, finish);
    for (Operation* op : parked)
      if (op != nullptr) complete_later(*op, -ECANCELED);
  }

 protected:
  void backend_counters(EngineCounters& c) const noexcept override {
    // Summed here, not counted in a shared atomic: a skip happens once per request. The pool's
    // lock and each descriptor's are taken, as anywhere: this runs on /metrics' schedule.
    std::uint64_t skipped = 0;
    const_cast<DescriptorPool<ReadyDescriptor>&>(descriptors_pool_).for_each([&](Descriptor& d) {
      std::lock_guard guard(d.lock);
      skipped += static_cast<ReadyDescriptor&>(d).skipped;
    });
    c.add("calls_skipped",
          "Receives and readable waits that parked without a system call: a short receive had "
          "emptied the socket since its last readiness report.",
          skipped);
  }

  void cancel_parked() noexcept override {
    // Collect under the pool's lock, complete after it: a completion may run in place (inline
    // mode, or a pool that cannot grow) and close its socket, which takes that lock again.
    // The chain runs through ReadyOp::next, a link in each operation's engine state kept for
    // this chain alone.
    Operation* chain = nullptr;
    descriptors_pool_.for_each([&chain](Descriptor& d) {
      std::lock_guard guard(d.lock);
      for (Operation*& slot : d.slot)
        if (Operation* op = std::exchange(slot, nullptr)) {
          state_of<ReadyOp>(*op).next = chain;
          chain = op;
        }
    });
    while (chain != nullptr) {
      Operation* op = chain;
      chain = state_of<ReadyOp>(*op).next;  // before completing: op may be gone afterwards
      complete_later(*op, -ECANCELED);
    }
  }

  std::size_t wait(int poller, std::int64_t timeout_ns,
                   std::span<sched::Event> out) noexcept override {
    Poller& p = pollers_[static_cast<std::size_t>(poller)];
    std::size_t count = 0;
    if (p.carried.handler != nullptr) {  // the event the previous wait had no room for
      out[count++] = std::exchange(p.carried, {});
      if (count == out.size()) return count;
      timeout_ns = 0;  // look for more, but do not sleep on an event in hand
    }
    // Each report yields up to two events, one per side. Asking for ceil(room / 2) fills the
    // batch, and at most one event then does not fit: it is kept in `carried` for the next
    // wait. Its operation is already out of its slot with a busy count held, so nothing else
    // can reach it meanwhile. (Half the room, rounded down, was zero for K = 1 and the report
    // array then overflowed.)
    const std::size_t room = out.size() - count;
    const std::size_t n = p.poller->wait(timeout_ns, std::span(p.reports).first((room + 1) / 2));
    if (n > 0) {
      // The kernel carried descriptor pointers from attach() to us; the C++ memory model (and
      // ThreadSanitizer) cannot see that edge. Every attach bumps `registrations` (release)
      // before its add(), and no report can name a descriptor before that call, so this
      // acquire load reads that bump or a later one (a read-modify-write chain, one release
      // sequence) and orders the attacher's writes before our reads. It replaces a mutex
      // taken after every non-empty wait. Proved under ThreadSanitizer by
      // EngineTest.BurstIsDeliveredAsBoundedTreesExactlyOnce/epoll (attaches on the test
      // thread, reaps on a worker) and the socket suites.
      (void)p.registrations.load(std::memory_order_acquire);
    }
    for (std::size_t i = 0; i < n; ++i) {
      const Readiness& report = p.reports[i];
      const auto bits = reinterpret_cast<std::uintptr_t>(report.token);
      auto* d = reinterpret_cast<ReadyDescriptor*>(bits & ~kTagMask);
      const bool ready[2] = {report.readable || report.error, report.writable || report.error};
      std::lock_guard guard(d->lock);
      // A stale report (its socket closed, the descriptor reused) only bumps generations.
      const bool current = (bits & kTagMask) == (d->generation & kTagMask);
      if (report.taken_error != 0 && current) d->taken_error = report.taken_error;
      if (report.stays_readable && current) d->stays_readable = true;
      for (int side = 0; side < 2; ++side) {
        if (!ready[side]) continue;
        ++d->seq[side];
        Operation* op = std::exchange(d->slot[side], nullptr);
        if (op == nullptr) continue;
        ++d->busy;  // the retry will run the system call; keep the fd open for it
        state_of<ReadyOp>(*op).ready_seq = d->seq[side];
        const sched::Event event{&retry, op, 0, reinterpret_cast<std::uintptr_t>(this)};
        if (count < out.size())
          out[count++] = event;
        else
          p.carried = event;
      }
    }
    return count;
  }

  // A retry still carried when the loop ends must not be lost: its operation left its slot.
  void on_poller_stop(int poller) noexcept override {
    Poller& p = pollers_[static_cast<std::size_t>(poller)];
    if (p.carried.handler == nullptr) return;
    const sched::Event event = std::exchange(p.carried, {});
    deliver({&event, 1});
  }

  void wake(int poller) noexcept override {
    wakes_.fetch_add(1, std::memory_order_relaxed);
    pollers_[static_cast<std::size_t>(poller)].poller->wake();
  }

 private:
  struct Poller {
    std::atomic<std::uint64_t> registrations{0};  // attaches so far; see attach() and wait()
    std::unique_ptr<ReadinessPoller> poller;
    std::vector<Readiness> reports;  // wait()'s thread only
    sched::Event carried;            // wait()'s thread only: a retry the last wait had no room for
  };

  ReadinessPoller& poller_of(const Descriptor& d) noexcept {
    return *pollers_[static_cast<std::size_t>(d.poller.load(std::memory_order_relaxed))].poller;
  }

  // Runs op's system call until it finishes or parks. The caller holds one `busy` count on the
  // descriptor, released here. Returns true if op finished (result in op.result).
  bool attempt(Operation& op) noexcept {
    auto& d = descriptor_of<ReadyDescriptor>(op);
    ReadyOp& state = state_of<ReadyOp>(op);
    const int side = Descriptor::side(op.kind);
    const Handle fd = d.fd;  // stable while busy > 0
    std::uint32_t seq = state.ready_seq;
    for (;;) {
      std::int64_t r = op.kind == OpKind::connect
                           ? posix::connect_step(op, fd, state.connect_started)
                           : posix::perform(op, fd);
      Descriptor::Finish finish;
      Handle orphan = kInvalidHandle;
      {
        std::lock_guard guard(d.lock);
        if (d.taken_error != 0 && hides_taken_error(op.kind, r))
          r = -std::exchange(d.taken_error, 0);
        note_drained(d, op, r, seq);
        if (r == -EAGAIN) {
          const bool cancelled =
              d.closed || op.cancel_requested.load(std::memory_order_relaxed) || cancelling();
          if (!cancelled && d.seq[side] != seq) {
            seq = d.seq[side];  // readiness arrived while we tried: try again
            continue;
          }
          if (!cancelled) {
            state.ready_seq = seq;
            d.slot[side] = &op;
            --d.busy;
            return false;
          }
          r = -ECANCELED;
        } else if (d.closed && is_read_side(op.kind)) {
          // Closed during the call (its read shutdown may be what ended it): cancelled, and a
          // connection it accepted is closed rather than handed to a closed listener's reader.
          // A send in flight is left alone by the close, and its result stands.
          if (op.kind == OpKind::accept && r >= 0) orphan = static_cast<Handle>(r);
          r = -ECANCELED;
        }
        --d.busy;
        finish = d.finish_if_closed();
      }
      finish_close(&d, finish);
      if (orphan != kInvalidHandle) close_handle(orphan);
      op.result = r;
      return true;
    }
  }

  static void retry(const sched::Event& event, sched::Disposition disposition) noexcept {
    auto* op = static_cast<Operation*>(event.target);
    auto* self = reinterpret_cast<ReadinessEngine*>(static_cast<std::uintptr_t>(event.data));
    auto& d = descriptor_of<ReadyDescriptor>(*op);
    if (disposition != sched::Disposition::drop && op->kind != OpKind::readable) {
      // Closed since the readiness took it out of its slot: it is still pending, and close()
      // cancels what is pending; run, a send would go out after close() returned
      // (CloseTest.AWriteWaitingForRoomIsCancelledByACloseBeforeItRunsAgain). A close from
      // here on finds the call in flight (busy), as for a first attempt.
      bool closed;
      {
        std::lock_guard guard(d.lock);
        closed = d.closed;
      }
      if (!closed) {
        SubmitBatch batch;
        if (self->attempt(*op)) op->complete(*op, op->result);
        return;
      }
    }
    {
      // Dropped (the scheduler is stopping) or closed: release the busy count and report
      // cancellation. A readable wait needs no second peek: the readiness that woke it is its
      // answer (saving a system call per request for a server that waits this way; rarely, as
      // with any readiness, the read after it finds nothing and waits).
      Descriptor::Finish finish;
      bool cancelled;
      {
        std::lock_guard guard(d.lock);
        --d.busy;
        cancelled = disposition == sched::Disposition::drop || d.closed ||
                    op->cancel_requested.load(std::memory_order_relaxed);
        finish = d.finish_if_closed();
      }
      self->finish_close(&d, finish);
      if (cancelled) {
        op->complete(*op, -ECANCELED);
        return;
      }
      SubmitBatch batch;
      op->complete(*op, 0);
    }
  }

  static void deliver_result(const sched::Event& event, sched::Disposition) noexcept {
    auto* op = static_cast<Operation*>(event.target);
    SubmitBatch batch;
    op->complete(*op, event.result);
  }

  void complete_later(Operation& op, std::int64_t result) noexcept {
    const sched::Event event{&deliver_result, &op, result, 0};
    deliver({&event, 1});
  }

  void finish_close(Descriptor* d, const Descriptor::Finish& finish) noexcept {
    if (finish.close_fd != kInvalidHandle) {
      poller_of(*d).remove(finish.close_fd);  // before the fd number can serve another socket
      close_handle(finish.close_fd);
      descriptors_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (finish.release) descriptors_pool_.release(d);
  }

  const char* const name_;
  std::vector<Poller> pollers_;
  DescriptorPool<ReadyDescriptor> descriptors_pool_;
};

}  // namespace

Result<std::unique_ptr<Engine>> create_readiness_engine(const char* name, MakeReadinessPoller make,
                                                        sched::Scheduler& scheduler,
                                                        const EngineOptions& options,
                                                        bool announce) {
  auto engine = std::make_unique<ReadinessEngine>(name, scheduler, options);
  if (auto ec = engine->init(make)) {
    log::error("{} engine: {}", name, ec.message());
    return ec;
  }
  if (announce)
    log::info("engine: {}, {}, batch {}, tree {}{}", name, describe_polling(options),
              options.max_batch, options.max_tree, options.inline_completions ? ", inline" : "");
  return std::unique_ptr<Engine>(std::move(engine));
}

}  // namespace arbor::io
