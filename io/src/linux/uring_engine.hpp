// UringEngine: the completion backend (Linux io_uring through liburing). This private header
// holds what its source files share: the poller-owned Ring, requests, io_uring's parts of a
// descriptor and of an operation, and the class. The design and its measurements are in
// docs/architecture.md ("UringEngine"); the invariants kept here:
// - Each ring has one thread at a time that prepares SQEs, submits and reaps: its poller thread,
//   in workers mode the worker holding the scheduler's poll right, in rings mode the worker
//   that owns it (called "the poller" below in every case; uring_rings.cpp has the rings mode's
//   own invariants). Others hand it requests through `Ring::incoming` (a Treiber stack the
//   poller takes whole and reverses), pushed under the descriptor's lock, so the poller sees
//   one socket's requests in the order they were made: a close always follows the starts
//   before it.
// - A thread that queued requests makes them the poller's business at the end of its
//   SubmitBatch: in workers mode by taking the poll right and submitting itself if it can;
//   otherwise by waking the poller, only if it announced sleep (a Dekker pair of seq_cst
//   operations on `incoming` and `sleeping`).
// - The poller closes an fd only when no worker is in a system call on it (`busy` == 0) and
//   after submitting every SQE that names it.
// - A descriptor with a multishot operation armed is not idle, so it is not recycled before
//   that operation's last CQE.
#pragma once

#include <liburing.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "arbor/io/engine.hpp"
#include "arbor/io/submit_batch.hpp"
#include "arbor/sched/worker_driver.hpp"
#include "common/descriptor.hpp"
#include "common/operation_state.hpp"
#include "common/timer_watch.hpp"
#include "linux/provided_buffers.hpp"

namespace arbor::io::uring {

class UringEngine;
struct Ring;

/// Rings mode: the ring the calling thread owns (set by WorkerRings::open() on the worker's
/// thread, cleared by close()); nullptr on every other thread.
inline thread_local Ring* this_thread_ring = nullptr;

// CQE user data: an Operation* (single-shot), or one of these. Operations and descriptors are
// at least 8-byte aligned, so a descriptor tagged with kMultishotTag cannot collide.
constexpr std::uint64_t kIgnore = 0;    // cancel requests
constexpr std::uint64_t kWakeRead = 1;  // the eventfd read
constexpr std::uint64_t kMultishotTag =
    2;  // UringDescriptor* | 2: the socket's multishot operation

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

constexpr unsigned kBufferCount = 1024;  // per ring
constexpr unsigned kBufferSize = 4096;
constexpr std::uint32_t kMaxChunks = 16;  // per socket: 64 KiB buffered at most
constexpr std::size_t kMaxAccepted = 64;  // per listener

// io_uring's part of a socket: its queued requests and, on the read side, its multishot
// operation. At most one multishot accept or receive runs per socket, armed when a reader first
// waits and kept until it ends (error, EOF, throttle, close). What it produces and no reader has
// taken yet waits here: accepted handles in `accepted` (from accepted_head on), received bytes
// as a list of provided buffers (chunk_head .. chunk_tail, linked through ProvidedBuffers::next),
// and a final result (EOF or an error). The descriptor is idle, and may be recycled, only once
// its multishot operation's last CQE has arrived.
struct UringDescriptor : Descriptor {
  Request close_request;
  Request cancel_request[2];
  Request arm_request;
  bool close_queued = false;
  bool cancel_queued[2] = {false, false};
  OpKind arm_kind = OpKind::receive;
  bool stream = false;  // a stream socket: receives may use the multishot path
  bool arm_queued = false;
  bool multishot_armed = false;
  bool throttled = false;  // a cancel was sent to stop it buffering more
  bool has_end = false;
  // Rings mode: its multishot operation was stopped to move the socket to another ring (a
  // BlockingRegion); that operation's last CQE on the old ring re-arms it on the new one.
  bool moving = false;
  // Rings mode: place() has counted it on its ring (Ring::sockets). Until then lend()'s walk
  // leaves it alone: adopt() made it visible with a first-guess ring that place() may change.
  bool placed = false;
  std::int64_t end_result = 0;
  // The ring whose provided buffers the chunk list holds: the one whose multishot operation
  // filled it. A socket's multishot operation is armed only with the list empty, so one list
  // never mixes two rings' buffers, even after the socket moved.
  int chunk_ring = 0;
  std::uint16_t chunk_head = ProvidedBuffers::kNone;
  std::uint16_t chunk_tail = ProvidedBuffers::kNone;
  std::uint32_t chunk_count = 0;
  std::vector<Handle> accepted;
  std::size_t accepted_head = 0;

  UringDescriptor() noexcept {
    close_request = {nullptr, RequestKind::close, this};
    cancel_request[0] = {nullptr, RequestKind::cancel_read, this};
    cancel_request[1] = {nullptr, RequestKind::cancel_write, this};
    arm_request = {nullptr, RequestKind::arm, this};
  }
  void reset(Handle handle, int owner) noexcept {
    Descriptor::reset(handle, owner);
    close_queued = cancel_queued[0] = cancel_queued[1] = false;
    stream = arm_queued = multishot_armed = throttled = has_end = moving = placed = false;
    chunk_head = chunk_tail = ProvidedBuffers::kNone;
    chunk_count = 0;
    accepted.clear();
    accepted_head = 0;
  }
  bool idle() const noexcept { return slots_empty() && !multishot_armed; }
};

// io_uring's part of an operation: its start request, whether it waits in its slot for the
// socket's multishot operation (no SQE of its own), and the kernel arguments that must live
// until its CQE (the socklen_t accept writes, the msghdr and iovec of the message operations).
struct UringOp {
  Request start;
  bool parked = false;
  // Written by the poller of the ring it was prepared on: an SQE of it is in that ring (its
  // CQE not reaped yet), and, rings mode, that ring cancelled it to move it to another ring.
  // Atomic because another ring's lend() reads them (under the socket's lock) for a socket
  // moved to it while the operation is still on its way out of the first ring: that operation
  // is the first ring's to restart (move_on()), not the second's to cancel.
  std::atomic<bool> in_ring{false};
  std::atomic<bool> moving{false};
  socklen_t address_size = 0;
  msghdr message;  // set by prepare() for the message kinds, before the kernel reads it
  iovec vector;
};

inline std::uint64_t multishot_data(UringDescriptor& d) noexcept {
  return reinterpret_cast<std::uintptr_t>(&d) | kMultishotTag;
}

/// Whether a ring set up with `params` has every feature and opcode this engine relies on.
std::error_code check_ring(io_uring& ring, const io_uring_params& params) noexcept;

/// Prepares `op` as a single-shot SQE on `fd` (user data: the operation).
void prepare(io_uring_sqe* sqe, Operation& op, int fd) noexcept;

/// The handle a multishot accept produced, as accept(2) would return it (uring_multishot.cpp).
std::int64_t finish_accept(Operation& op, std::int64_t handle) noexcept;

struct Ring {
  io_uring ring{};
  bool initialised = false;
  int eventfd = -1;
  std::uint64_t eventfd_value = 0;
  int index = 0;                  // in the engine's rings_
  // Rings mode: a spare worker's ring, set up by the spare when it first opens it (spares start
  // only for blocking regions); until then place() puts no socket on it.
  bool spare = false;
  bool wake_read_posted = false;  // poller thread only
  // Poller thread only: SQEs prepared whose last CQE has not been reaped yet (a multishot
  // operation counts once, until the CQE without IORING_CQE_F_MORE). Rings mode drains a
  // closing ring until it is 0: then the kernel holds nothing that points into our memory.
  std::size_t in_flight = 0;
  // Rings mode, poller thread only: operations this ring cancelled to move their sockets to
  // other rings (lend()), whose last CQE has not been reaped yet.
  std::size_t moving = 0;
  // Rings mode: sockets placed on this ring and not closed yet. lend() walks the descriptors
  // only if there are any. seq_cst with `state` (place() says why).
  std::atomic<std::int64_t> sockets{0};
  // Made disabled (single-issuer): the thread that will submit to it enables it (enable()).
  bool needs_enable = false;
  const char* setup_name = "";  // the set-up UringEngine::set_up() found, for the logs
  // Rings mode. `state`: whether the owning worker has opened the ring yet, whether it is in a
  // BlockingRegion (lent: its sockets moved to other rings, and none is placed on it), and
  // whether it has closed it for good (retired). seq_cst with `incoming`: a thread that pushed a
  // request and then sees `retired` finishes the queue itself (there is no owner to submit it any
  // more), and the owner retiring sets it before taking the queue a last time, so no request is
  // lost.
  enum class State : std::uint8_t { unopened, open, lent, retired };
  std::atomic<State> state{State::unopened};
  // Sticky WorkerDriver::unpark(): the next wait() looks without waiting. seq_cst with
  // `sleeping`, like `incoming`.
  std::atomic<bool> unparked{false};
  // Rings mode: handed the timer watch while asleep (its wait sleeps again towards the deadline).
  std::atomic<bool> rearm{false};
  UringEngine* engine = nullptr;  // rings mode: who finishes the queue of a retired ring
  // Requests from other threads, newest first. seq_cst with `sleeping` (see the file comment).
  std::atomic<Request*> incoming{nullptr};
  std::atomic<bool> sleeping{false};
  sched::Scheduler* polled_by = nullptr;  // workers mode: the scheduler whose workers poll
  std::atomic<std::uint64_t>* wakes = nullptr;
  std::atomic<std::uint64_t>* submits = nullptr;
  ProvidedBuffers buffers;  // freed after ~Ring's body has exited the ring (which unregisters it)

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
  /// finish what is queued here and now (uring_rings.cpp).
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

/// Whether a wait's result (io_uring_submit_and_wait_timeout()'s) is a failure to report: not
/// a timeout, an interruption, or a transient refusal.
inline bool wait_failed(int e) noexcept {
  return e < 0 && e != -ETIME && e != -EINTR && e != -EAGAIN && e != -EBUSY;
}

// Rings mode: the driver a worker parks in, its own ring (uring_rings.cpp). Its buffers are the
// owner's alone: wait() fills them, dispatch() hands them over.
class WorkerRing final : public sched::WorkerDriver {
 public:
  WorkerRing(UringEngine& engine, Ring& ring, int index, std::size_t max_batch);
  bool wait(std::int64_t timeout_ns) noexcept override;
  void dispatch() noexcept override;
  bool pending() const noexcept override;
  void unpark() noexcept override;
  void before_blocking() noexcept override;
  void after_blocking() noexcept override;

 private:
  friend class UringEngine;
  UringEngine& engine_;
  Ring& ring_;
  const int index_;
  std::vector<sched::Event> events_;  // K IO events and up to K timers
  std::vector<Timer*> fired_;         // scratch for the timers
  std::size_t reaped_ = 0;            // events_[0, reaped_) wait for dispatch()
  bool in_hand_ = false;              // counted in rings_in_hand_ (a paused clock only)
  void leave_hand() noexcept;
};

// Rings mode: the scheduler's factory of WorkerRings, a ring per worker (uring_rings.cpp).
class WorkerRings final : public sched::WorkerDrivers {
 public:
  explicit WorkerRings(UringEngine& engine) noexcept : engine_(engine) {}
  sched::WorkerDriver* open(std::size_t worker) noexcept override;
  void close(std::size_t worker, sched::WorkerDriver& driver) noexcept override;

 private:
  UringEngine& engine_;
};

class UringEngine final : public Engine {
 public:
  UringEngine(sched::Scheduler& scheduler, const EngineOptions& options);
  ~UringEngine() override;
  /// Sets up the rings (probing features, falling back as the file comment says) and starts
  /// the pollers. Rings mode: makes the rings' queues and eventfds (each ring itself is set up
  /// by its worker's open()); `attach`: hands the WorkerRings to the scheduler (tests drive
  /// them from threads of their own instead).
  std::error_code init(bool attach = true);
  /// Rings mode: the drivers a scheduler (or a test acting as its workers) opens.
  sched::WorkerDrivers* worker_drivers() noexcept override {
    return options().io_mode == IoMode::rings ? &worker_rings_ : nullptr;
  }

  const char* name() const noexcept override { return "uring"; }
  /// Rings mode: the sockets placed on ring `index` and not closed yet (for tests).
  std::int64_t ring_sockets(std::size_t index) const noexcept {
    return rings_[index]->sockets.load(std::memory_order_relaxed);
  }
  /// The set-up of the rings (the first one's: a spare's, made later, may differ).
  const char* mode() const noexcept { return rings_.front()->setup_name; }
  /// For the start-up line: single-shot or multishot operations, and why.
  std::string operations() const;

  Result<DescriptorRef> attach(Handle handle) noexcept override;
  bool start(Operation& op) noexcept override;
  std::int64_t receive_now(Operation& op) noexcept override;
  void cancel(Operation& op) noexcept override;
  void close(DescriptorRef socket) noexcept override;

 protected:
  void cancel_parked() noexcept override;
  std::size_t wait(int poller, std::int64_t timeout_ns,
                   std::span<sched::Event> out) noexcept override;
  void wake(int poller) noexcept override { rings_[static_cast<std::size_t>(poller)]->wake_now(); }
  void on_poller_start(int poller) noexcept override;
  void on_poller_stop(int poller) noexcept override;
  void backend_counters(EngineCounters& counters) const noexcept override;
  bool completions_ready() const noexcept override;
  void earlier_deadline() noexcept override;
  void on_drivers_detached() noexcept override;

 private:
  friend struct Ring;
  friend class WorkerRing;
  friend class WorkerRings;

  // --- core (uring_engine.cpp) -------------------------------------------------------------
  // Exact under d.lock (the ring to push the socket's requests to); outside it, a ring with
  // the same set-up as the socket's.
  Ring& ring_of(const Descriptor& d) noexcept {
    return *rings_[static_cast<std::size_t>(d.poller.load(std::memory_order_relaxed))];
  }
  // Sets `r` up as its io mode prefers, falling back to older set-ups; its buffer ring too,
  // with multishot operations (or, failing that, turns them off for every ring).
  std::error_code set_up(Ring& r) noexcept;
  // Poller thread: post the eventfd read a wake completes, unless one is posted.
  static void post_wake_read(Ring& r) noexcept;
  // Poller thread: turns up to out.size() CQEs into events (advancing the CQ past them);
  // returns their number. The wake read's and cancels' CQEs produce none.
  std::size_t reap_cqes(Ring& r, std::span<sched::Event> out) noexcept;
  // Under d.lock: the shared admission rule (admit()); if admitted, op's io_uring state is
  // constructed. False: op.result holds its inline result.
  bool admit_start(UringDescriptor& d, Operation& op) const noexcept;
  // Under d.lock: occupy the slot and hand the start to the poller (in lock order).
  static void queue_start(Ring& ring, UringDescriptor& d, Operation& op, int side) noexcept;
  // Under d.lock: a close that waited for `busy` to drain goes to the poller now. True if it
  // pushed the request: the caller must then notify the poller once it unlocks.
  [[nodiscard]] static bool queue_close_if_due(Ring& ring, UringDescriptor& d) noexcept;
  // Poller thread: turn every queued request into SQEs (or, for a closed socket, complete it).
  // Rings mode: a request for a socket moved to another ring since it was queued goes on to
  // that ring (forward()).
  void drain(Ring& r) noexcept;
  // Under d.lock, from ring `r`'s poller: if the socket has moved off `r`, push `request` to
  // its ring now and return it (the caller kicks it after unlocking); else nullptr.
  Ring* forward(Ring& r, UringDescriptor& d, Request& request) noexcept;
  // A queued start whose socket was closed (or which was cancelled) before it reached the
  // ring: complete it as if the kernel had cancelled it.
  void finish_refused(Operation& op) noexcept;
  // Poller thread: cancel the socket's operations, submit, then close(2) its fd.
  void close_now(Ring& r, UringDescriptor& d) noexcept;
  // A CQE for op: free its slot, then complete it (the slot must be free first so the
  // resumed coroutine can start its next operation on this side).
  static void complete(const sched::Event& event, sched::Disposition) noexcept;

  // --- multishot, worker side (uring_multishot.cpp) ----------------------------------------
  bool start_multishot_accept(UringDescriptor& d, Operation& op) noexcept;
  bool start_multishot_receive(UringDescriptor& d, Operation& op) noexcept;
  // Under d.lock: op waits in its slot for the multishot operation's next result.
  static void park(UringDescriptor& d, Operation& op) noexcept;
  static Operation* parked(UringDescriptor& d) noexcept;
  // Under d.lock: ask the poller to arm the socket's multishot operation unless it runs or is
  // about to. True if a request was pushed (the caller notifies the poller after unlocking).
  static bool request_arm(Ring& ring, UringDescriptor& d, OpKind kind) noexcept;
  // Under d.lock: moves buffered bytes into op's buffer, oldest first, and hands each buffer
  // it empties to `done`. Returns the bytes moved.
  template <class Done>
  static std::size_t take_chunks(ProvidedBuffers& buffers, UringDescriptor& d, Operation& op,
                                 Done&& done) noexcept;
  // Under d.lock: hands a consumed chunk back to the ring that lent it (d.chunk_ring): into its
  // buffer ring if `current` is that ring (its poller calls), else through give_back().
  void return_chunk(Ring* current, UringDescriptor& d, std::uint16_t id) noexcept;
  ProvidedBuffers& chunk_buffers(const UringDescriptor& d) noexcept {
    return rings_[static_cast<std::size_t>(d.chunk_ring)]->buffers;
  }
  // Under d.lock: the final result the multishot receive ended with. End of stream stays (every
  // later read sees it, as with recv(2)); an error is reported once.
  static std::int64_t take_end(UringDescriptor& d) noexcept;

  // --- multishot, poller side (uring_multishot.cpp) ----------------------------------------
  // Under d.lock: submit the socket's multishot operation.
  void arm(Ring& r, UringDescriptor& d) noexcept;
  // Under d.lock: stop the socket's multishot operation (its last CQE clears multishot_armed).
  static void stop_multishot(Ring& r, UringDescriptor& d) noexcept;
  // A kernel that rejects the multishot opcode variant: log once, use single-shot from now on.
  void unsupported(std::atomic<bool>& flag, const char* what) noexcept;
  // One CQE of a socket's multishot operation. Returns true if it completed the waiting reader,
  // with the event for it in `event`.
  bool on_multishot(Ring& r, UringDescriptor& d, int res, unsigned flags,
                    sched::Event& event) noexcept;
  // Under d.lock: keep an accepted handle for the next accept; stop accepting when enough wait.
  void store_accepted(Ring& r, UringDescriptor& d, Handle handle, bool more,
                      Handle& orphan) noexcept;
  // Under d.lock: append a buffer ring `r` received to the socket's chunk list.
  static void append_chunk(Ring& r, UringDescriptor& d, std::uint16_t id,
                           std::uint32_t length) noexcept;
  // A reader the poller took out of its slot (so these do not touch the slot again).
  void deliver_claimed(Operation& op, std::int64_t result) noexcept;
  static void complete_claimed(const sched::Event& event, sched::Disposition) noexcept;
  static void complete_accepted(const sched::Event& event, sched::Disposition) noexcept;

  // --- rings mode (uring_rings.cpp) ---------------------------------------------------------
  // On worker `index`'s thread: set the ring up (single-issuer first), its buffers, its driver.
  WorkerRing* open_ring(std::size_t index) noexcept;
  // On the owner's thread: retire the ring, cancel and reap everything it has in flight,
  // deliver what that completes, and exit the ring.
  void close_ring(WorkerRing& driver) noexcept;
  // Any thread, the ring retired: finish its queued requests without the kernel (starts and
  // parked readers complete with -ECANCELED, closes close the fd).
  void finish_retired(Ring& r) noexcept;
  void refuse_close(UringDescriptor& d) noexcept;
  // Owner: one wait of a WorkerRing (drain, sleep with the timer watch, reap, timers).
  std::size_t wait_in_ring(WorkerRing& w, std::int64_t timeout_ns) noexcept;
  // Any thread: whether ring `index` is in the kernel waiting (its owner announced sleep).
  bool ring_asleep(int index) const noexcept {
    return rings_[static_cast<std::size_t>(index)]->sleeping.load(std::memory_order_seq_cst);
  }
  // The timer watch (common/timer_watch.hpp): ring `self`, back from the kernel, gives it up
  // if it held it; hands it to a sleeping ring from `first` on (all of them, or all but the
  // one before `first`), waking it to sleep again towards the deadline (Ring::rearm).
  bool release_timer_watch(int self) noexcept;
  void hand_over_timer_watch(int first, bool all) noexcept;
  // After attach: a ring that will serve the descriptor (one that takes_sockets()).
  void place(UringDescriptor& d) noexcept;
  static bool takes_sockets(const Ring& r) noexcept;
  // On the owner's thread, its BlockingRegion beginning: move the ring's sockets to the other
  // open rings (cancelling what it has in flight for them, which those rings start again) and
  // take no new ones until reclaim(). A socket with a connect in progress stays.
  void lend(WorkerRing& w) noexcept;
  void reclaim(WorkerRing& w) noexcept;
  // On the owner's thread: reaps and delivers until `left` (a count reaping lowers) is 0,
  // calling after() after each reap; waits at most a second at a time, saying so (with `what`)
  // each time it must wait again, and gives up (logged) only if waiting fails.
  template <class After>
  void reap_until_zero(WorkerRing& w, const std::size_t& left, const char* what,
                       After&& after) noexcept;
  // Ring `r`'s poller, reaping the CQE of an operation lend() cancelled: false if it is to
  // complete with `result` as it is; true if it was started again on the socket's new ring.
  bool move_on(Ring& r, Operation& op, int result) noexcept;

  std::vector<std::unique_ptr<Ring>> rings_;
  std::vector<std::unique_ptr<WorkerRing>> worker_ring_drivers_;  // rings mode, per ring
  WorkerRings worker_rings_{*this};
  TimerWatch timer_watch_;  // rings mode: which sleeping ring waits for the timers
  // Rings mode with a paused (test) clock: rings between their reap and their dispatch.
  std::atomic<int> rings_in_hand_{0};
  DescriptorPool<UringDescriptor> pool_;
  // What only io_uring counts (counters() reports them by name).
  std::atomic<std::uint64_t> submits_{0};
  std::atomic<std::uint64_t> multishot_arms_{0};
  std::atomic<std::uint64_t> buffered_reads_{0};
  std::atomic<std::uint64_t> ring_moves_{0};
  // Cleared (for good) when the kernel turns out not to support them.
  std::atomic<bool> multishot_accept_{options().multishot};
  std::atomic<bool> multishot_receive_{options().multishot};
};

}  // namespace arbor::io::uring
