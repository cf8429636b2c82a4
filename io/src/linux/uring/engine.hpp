// UringEngine: the completion backend (Linux io_uring through liburing), in io/src/linux/uring/:
//   ring.hpp/.cpp          a ring, its set-up, and the queue of requests other threads leave it
//   engine.hpp/.cpp        the engine's core: attach, start, cancel, close, the poller's drain
//                          and reap; io_uring's parts of a socket and of an operation
//   shared_ring.cpp        workers and pollers modes: one ring waited on by the poll right's
//                          holder, or by each poller thread
//   ring_per_worker.cpp    rings mode: each worker parks in its own ring (WorkerRing), the timer
//                          watch, a paused clock's look over every ring, closing a ring
//   ring_lending.cpp       rings mode: where sockets are placed, and how a worker entering a
//                          BlockingRegion lends its ring's sockets to the others
//   multishot.cpp          multishot accept and receive into provided buffers
//   provided_buffers.*     the buffer ring those receives fill
// The design and its measurements are in docs/architecture.md ("UringEngine"). Invariants kept
// across the files (ring.hpp has the request queue's, ring_per_worker.cpp the rings mode's):
// - The poller closes an fd only when no worker is in a system call on it (`busy` == 0) and
//   after submitting every SQE that names it.
// - A descriptor with a multishot operation armed is not idle, so it is not recycled before
//   that operation's last CQE.
// - Close means closed (common/descriptor.hpp): close() closes the fd on the calling thread if
//   nothing names it (unreferenced()), or through the kernel if the thread drives the socket's
//   ring (drives(): rings mode, its owner), cancelling and reaping the work that holds the file
//   first; else it shuts the socket down and the ring's poller closes the fd. A CQE that reaches
//   a closed socket completes its operation with -ECANCELED, closing a connection it accepted.
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

#include "arbor/io/submit_batch.hpp"
#include "arbor/sched/worker_driver.hpp"
#include "common/descriptor.hpp"
#include "common/engine_core.hpp"
#include "common/operation_state.hpp"
#include "common/timer_watch.hpp"
#include "linux/uring/provided_buffers.hpp"
#include "linux/uring/ring.hpp"

namespace arbor::io::uring {

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

/// Prepares `op` as a single-shot SQE on `fd` (user data: the operation).
void prepare(io_uring_sqe* sqe, Operation& op, int fd) noexcept;

/// The handle a multishot accept produced, as accept(2) would return it (multishot.cpp).
std::int64_t finish_accept(Operation& op, std::int64_t handle) noexcept;

// Rings mode: the driver a worker parks in, its own ring (ring_per_worker.cpp). Its buffers are the
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

// Rings mode: the scheduler's factory of WorkerRings, a ring per worker (ring_per_worker.cpp).
class WorkerRings final : public sched::WorkerDrivers {
 public:
  explicit WorkerRings(UringEngine& engine) noexcept : engine_(engine) {}
  sched::WorkerDriver* open(std::size_t worker) noexcept override;
  void close(std::size_t worker, sched::WorkerDriver& driver) noexcept override;

 private:
  UringEngine& engine_;
};

class UringEngine final : public EngineCore {
 public:
  UringEngine(sched::Scheduler& scheduler, const EngineOptions& options);
  ~UringEngine() override;
  /// Sets up the rings (probing features, falling back as the file comment says) and starts
  /// the pollers. Rings mode: makes the rings' queues and the workers' rings (a spare's is set up
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
  Result<DescriptorRef> attach_stream(Handle handle) noexcept override;
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
  // Workers mode: the shared ring's completion work runs on whichever worker submitted the
  // request (ring.cpp's set-up table).
  bool completion_work_on_sleepers() const noexcept override {
    return options().io_mode == IoMode::workers;
  }
  void earlier_deadline() noexcept override;
  void on_drivers_detached() noexcept override;

 private:
  friend struct Ring;
  friend class WorkerRing;
  friend class WorkerRings;

  // --- core (engine.cpp; set_up() and post_wake_read(): ring.cpp) ------------------------
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
  // Under d.lock, closed: no SQE names the fd now or will, and no request points at the
  // descriptor, so close() may close the fd and recycle the descriptor on its own thread.
  static bool unreferenced(const UringDescriptor& d) noexcept;
  // Whether the calling thread submits to and reaps `ring` (rings mode: its owner), so that a
  // close can go through the kernel before it returns.
  bool drives(const Ring& ring) const noexcept;
  // Rings mode: a send started here goes into the ring rather than send(2) (start() has the rule).
  bool sends_through_ring(const Ring& ring) const noexcept;
  // A queued start whose socket was closed (or which was cancelled) before it reached the
  // ring: complete it as if the kernel had cancelled it.
  void finish_refused(Operation& op) noexcept;
  // Poller thread of `r`: cancel the socket's operations, submit and run the completion work
  // that drops the kernel's references, then close(2) its fd. nullptr, from any thread: close
  // the fd without the kernel (a retired ring, whose owner's close cancels what it had in
  // flight, or an unreferenced() socket); a parked reader completes with -ECANCELED either way.
  void close_now(Ring* r, UringDescriptor& d) noexcept;
  // A CQE for op: free its slot, then complete it (the slot must be free first so the
  // resumed coroutine can start its next operation on this side).
  static void complete(const sched::Event& event, sched::Disposition) noexcept;

  // --- multishot, worker side (multishot.cpp) ----------------------------------------
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

  // --- multishot, poller side (multishot.cpp) ----------------------------------------
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

  // --- rings mode (ring_per_worker.cpp; placing and lending sockets: ring_lending.cpp) ----
  // On worker `index`'s thread: enable its ring (a spare's: set it up first), and its driver.
  WorkerRing* open_ring(std::size_t index) noexcept;
  // On the owner's thread: retire the ring, cancel and reap everything it has in flight, and
  // deliver what that completes (~Ring exits the ring, with the engine).
  void close_ring(WorkerRing& driver) noexcept;
  // Any thread, the ring retired: finish its queued requests without the kernel (starts and
  // parked readers complete with -ECANCELED, closes close the fd).
  void finish_retired(Ring& r) noexcept;
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
  // attach()'s and attach_stream()'s common part: `stream` lets receives take the multishot
  // path (false unless multishot operations are on).
  Result<DescriptorRef> adopt(Handle handle, bool stream) noexcept;
  // After attach: a ring that will serve the descriptor (one that takes_sockets()).
  void place(UringDescriptor& d) noexcept;
  static bool takes_sockets(const Ring& r) noexcept;
  // On the owner's thread, its BlockingRegion beginning: move the ring's sockets to the other
  // open rings (cancelling what it has in flight for them, which those rings start again) and
  // take no new ones until reclaim(). A socket with a connect in progress stays.
  void lend(WorkerRing& w) noexcept;
  void reclaim(WorkerRing& w) noexcept;
  // On the owner's thread: reaps and delivers until `left` (a count reaping lowers) is 0, and
  // with `finish_queue` finishes the (retired) ring's queue after each reap; waits at most a
  // second at a time, saying so (with `what`) each time it must wait again, and gives up
  // (logged) only if waiting fails.
  void reap_until_zero(WorkerRing& w, const std::size_t& left, const char* what,
                       bool finish_queue) noexcept;
  // Ring `r`'s poller, reaping the CQE of an operation lend() cancelled: false if it is to
  // complete with `result` as it is; true if it was started again on the socket's new ring.
  bool move_on(Ring& r, Operation& op, int result) noexcept;

  std::vector<std::unique_ptr<Ring>> rings_;
  std::vector<std::unique_ptr<WorkerRing>> worker_ring_drivers_;  // rings mode, per ring
  WorkerRings worker_rings_{*this};
  std::atomic<std::size_t> next_place_{0};  // rings mode: place()'s round-robin
  TimerWatch timer_watch_;                  // rings mode: which sleeping ring waits for the timers
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
