// Ring: one io_uring of the UringEngine and the queue of requests other threads leave for it.
//
// Each ring has one thread at a time that prepares SQEs, submits and reaps, called its poller
// in every io mode: a poller thread (pollers mode), the worker holding the scheduler's poll right
// (workers mode, shared_ring.cpp), or the worker that owns it (rings mode, ring_per_worker.cpp).
// Everyone else hands it requests through `incoming` (a Treiber stack the poller takes whole
// and reverses), pushed under the socket's lock, so the poller sees one socket's requests in
// the order they were made: a close always follows the starts before it. A thread that queued
// requests makes them the poller's business at the end of its SubmitBatch (flush()).
//
// The fields are grouped by who may touch them; each group's rule is stated once, at its head.
#pragma once

#include <liburing.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <system_error>

#include "arbor/io/submit_batch.hpp"
#include "arbor/sched/scheduler.hpp"
#include "common/descriptor.hpp"
#include "linux/uring/provided_buffers.hpp"

namespace arbor::io::uring {

class UringEngine;
struct Ring;

/// Rings mode: the ring the calling thread owns (set by WorkerRings::open() on the worker's
/// thread, cleared by close()); nullptr on every other thread.
inline thread_local Ring* this_thread_ring = nullptr;

// CQE user data: an Operation* (single-shot), or one of these. Operations and descriptors are
// at least 8-byte aligned, so a descriptor tagged with kMultishotTag cannot collide.
constexpr std::uint64_t kIgnore = 0;        // cancel requests
constexpr std::uint64_t kWakeRead = 1;      // the eventfd read
constexpr std::uint64_t kMultishotTag = 2;  // UringDescriptor* | 2: its multishot operation

enum class RequestKind : std::uint8_t { start, cancel_read, cancel_write, close, arm };

// A request from a worker to the poller, pushed onto its ring's incoming stack. It lives in
// what it is about: an operation's start in the operation's state, cancel, close and arm
// requests in the descriptor (not in the operation, because an operation may complete and its
// memory be reused for the next one while a cancel request for it is still queued; the
// descriptor outlives both).
struct Request {
  Request* next = nullptr;
  RequestKind kind = RequestKind::start;
  void* owner = nullptr;  // the Operation (start) or the UringDescriptor (the others)
};

/// Whether a ring set up with `params` has every feature and opcode this engine relies on.
std::error_code check_ring(io_uring& ring, const io_uring_params& params) noexcept;

/// Whether a wait's result (io_uring_submit_and_wait_timeout()'s) is a failure to report: not
/// a timeout, an interruption, or a transient refusal.
inline bool wait_failed(int e) noexcept {
  return e < 0 && e != -ETIME && e != -EINTR && e != -EAGAIN && e != -EBUSY;
}

struct Ring {
  // --- Set before any other thread sees the ring (UringEngine::init()), read-only after. -----
  int index = 0;  // in the engine's rings_
  // Rings mode: a spare worker's ring, set up by the spare when it first opens it (spares start
  // only for blocking regions); until then no socket is placed on it.
  bool spare = false;
  UringEngine* engine = nullptr;                // who finishes the queue of a retired ring (kick())
  sched::Scheduler* polled_by = nullptr;        // workers mode: the scheduler whose workers poll
  std::atomic<std::uint64_t>* wakes = nullptr;  // the engine's counters
  std::atomic<std::uint64_t>* submits = nullptr;

  // --- The poller's alone. Set up by UringEngine::set_up() (a spare's by the spare, before its
  // `state` becomes open); other threads read the kernel's shared flags and queue heads of an
  // open ring only (UringEngine::completions_ready()), and the ring is exited by ~Ring alone. -
  io_uring ring{};
  // Made by set_up() with the ring. Other threads write to it only once they saw the owner
  // announce sleep (`sleeping`, below), which it does only after the ring is open.
  int eventfd = -1;
  bool initialised = false;
  bool needs_enable = false;    // made disabled (single-issuer): enable() on the submitting thread
  const char* setup_name = "";  // the set-up found, for the logs
  bool setup_failed_logged = false;  // a spare's: its first failed set-up was logged
  std::uint64_t eventfd_value = 0;
  bool wake_read_posted = false;
  // SQEs prepared whose last CQE has not been reaped yet (a multishot operation counts once,
  // until the CQE without IORING_CQE_F_MORE). Rings mode drains a closing ring until it is 0:
  // then the kernel holds nothing that points into our memory.
  std::size_t in_flight = 0;
  // Rings mode: operations this ring cancelled to move their sockets to other rings (lend()),
  // whose last CQE has not been reaped yet.
  std::size_t moving = 0;
  // Its buffer ring (the poller's side; workers give buffers back through it, see there).
  // Freed after ~Ring's body has exited the ring, which unregisters it.
  ProvidedBuffers buffers;

  // --- Any thread: atomics, each pairing named. ---------------------------------------------
  // Requests from other threads, newest first. A Dekker pair with `sleeping` (seq_cst both):
  // a pusher that sees the poller not sleeping leaves the request to its next drain; a poller
  // that announced sleep drains again if it finds one.
  std::atomic<Request*> incoming{nullptr};
  std::atomic<bool> sleeping{false};
  // Sticky WorkerDriver::unpark(): the next wait() looks without waiting. seq_cst with
  // `sleeping`, like `incoming`.
  std::atomic<bool> unparked{false};
  // Rings mode: handed the timer watch while asleep (its wait sleeps again towards the deadline).
  std::atomic<bool> rearm{false};
  // Rings mode: whether the owning worker has opened the ring yet, whether it is in a
  // BlockingRegion (lent: its sockets moved to other rings, and none is placed on it), and
  // whether it has closed it for good (retired). seq_cst with `incoming`: a thread that pushed a
  // request and then sees `retired` finishes the queue itself (there is no owner to submit it
  // any more), and the owner retiring sets it before taking the queue a last time, so no request
  // is lost. seq_cst with `sockets` too (UringEngine::place()).
  enum class State : std::uint8_t { unopened, open, lent, retired };
  std::atomic<State> state{State::unopened};
  // Rings mode: sockets placed on this ring and not closed yet (lend() walks the descriptors
  // only if there are any).
  std::atomic<std::int64_t> sockets{0};
  // Rings mode: sends its owner queued here rather than calling send(2) (UringEngine::start()).
  // Written by the owner alone, with a load and a store (no read-modify-write on the send path);
  // read by counters().
  std::atomic<std::uint64_t> ring_sends{0};

  ~Ring() {
    if (initialised) io_uring_queue_exit(&ring);
    close_handle(eventfd);
  }

  /// Takes every queued request, oldest first (the stack holds them newest first, and one
  /// socket's requests must be handled in the order they were made).
  Request* take_in_order(std::memory_order order) noexcept {
    Request* list = incoming.exchange(nullptr, order);
    Request* fifo = nullptr;
    while (list != nullptr) {
      Request* next = list->next;
      list->next = fifo;
      fifo = list;
      list = next;
    }
    return fifo;
  }

  /// Takes every queued request and hands each to `handle`, oldest first.
  template <class Handler>
  void take_each(std::memory_order order, Handler&& handle) noexcept {
    for (Request* fifo = take_in_order(order); fifo != nullptr;) {
      Request& request = *fifo;
      fifo = fifo->next;  // before handle(): it may push the request again (to another ring)
      handle(request);
    }
  }

  /// Pushes a request; returns true if the stack was empty (the poller may need waking).
  bool push(Request& request) noexcept {
    Request* head = incoming.load(std::memory_order_relaxed);
    do {
      request.next = head;
    } while (!incoming.compare_exchange_weak(head, &request, std::memory_order_seq_cst,
                                             std::memory_order_relaxed));
    return head == nullptr;
  }

  void wake_now() noexcept {
    wakes->fetch_add(1, std::memory_order_relaxed);
    const std::uint64_t one = 1;
    [[maybe_unused]] auto r = ::write(eventfd, &one, sizeof one);
  }

  static void wake_if_sleeping(void* context) noexcept {
    auto* self = static_cast<Ring*>(context);
    if (self->sleeping.load(std::memory_order_seq_cst) &&
        self->sleeping.exchange(false, std::memory_order_seq_cst))
      self->wake_now();
  }

  /// After a push: hand the request over now, or at the end of the current SubmitBatch.
  void notify() noexcept {
    if (!SubmitBatch::defer(&Ring::flush, this)) flush(this);
  }

  /// After a push: wake the poller if it announced sleep; in rings mode, if the ring is retired,
  /// finish what is queued here and now (ring.cpp).
  void kick() noexcept;

  /// Workers mode: a worker that can take the poll right submits (and reaps) itself, with no
  /// wake; otherwise the holder drains the requests before it next sleeps, or is woken if it
  /// sleeps now.
  ///
  /// Called once per ring at the end of the outermost SubmitBatch, and the engines and the runtime
  /// open one around every item they run (completions, timers, spawns, yields): so what one item
  /// queues already reaches the kernel in one io_uring_enter. Not later, not batched over the next
  /// items: the worker's next item may run for long, and nobody else would submit meanwhile.
  /// Nothing but this flush wakes the driver's sleeper for them, and a worker that is awake drains
  /// the ring only at its next look (every kPollInterval items) or when it parks; a holder awake
  /// right now (a look, or a reaper on its way out) may have drained already, and then our requests
  /// wait for that next look or park, as completions do while every worker is busy. Deferring to
  /// "before this worker's next item, or its look when it runs out of work" would keep that bound,
  /// but takes a scheduler hook and saves an enter only on a worker's way to idleness: none
  /// measurable on the HTTP server (single-shot receives, one enter per request either way;
  /// multishot queues nothing per request).
  ///
  /// Rings mode: the ring's owner leaves its own requests queued (no wake, no system call): it
  /// drains and submits them with the same io_uring_enter that reaps, at its next look
  /// (pending() says yes while they wait) or before it sleeps.
  static void flush(void* context) noexcept {
    auto* self = static_cast<Ring*>(context);
    if (self->polled_by != nullptr && self->polled_by->poll_driver()) return;
    if (self == this_thread_ring) return;
    self->kick();
  }

  /// Poller thread: an SQE, submitting what is queued first if the SQ is full. Counted in
  /// `in_flight` (every SQE this engine prepares asks for a CQE).
  io_uring_sqe* get_sqe() noexcept {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    while (sqe == nullptr) {
      submits->fetch_add(1, std::memory_order_relaxed);
      if (const int e = io_uring_submit(&ring); e < 0 && e != -EAGAIN && e != -EBUSY && e != -EINTR)
        report_submit_error(e);
      sqe = io_uring_get_sqe(&ring);
    }
    ++in_flight;
    return sqe;
  }
  static void report_submit_error(int e) noexcept;
  /// On the thread that will submit to it: makes it the ring's one issuer, if the ring was set
  /// up single-issuer (and so disabled until now).
  std::error_code enable() noexcept;
};

}  // namespace arbor::io::uring
