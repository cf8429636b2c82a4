// UringEngine: the completion backend (Linux io_uring through liburing). This private header
// holds what its two source files share: the poller-owned Ring, the request kinds and the class.
//
// Each ring belongs to its poller thread: it is the only thread that prepares SQEs, submits
// and reaps (IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN where the kernel has
// them). That matters for speed, not just tidiness: io_uring runs an operation's completion
// work in the context of the task that submitted it, so a ring fed by many workers makes the
// kernel interrupt or wake those workers for every completion. Owned by the poller, all of it
// happens inside the poller's own io_uring_enter.
//
// Workers hand requests to the poller through a lock-free intrusive stack (Treiber push; the
// poller takes the whole stack and reverses it, so requests are handled in order). Start,
// cancel and close requests for one socket are pushed under the descriptor's lock, so the
// poller sees them in the order they were made: a close always follows the starts before it.
// A sleeping poller is woken through an eventfd it keeps a read posted on; a worker wakes it
// only if the poller said it was going to sleep (a Dekker pair of seq_cst operations on
// `incoming` and `sleeping`), and inside a SubmitBatch the wake is deferred to the end of the
// completion, so one wake carries every operation that completion started.
//
// Sends are tried once with MSG_DONTWAIT on the worker first: on a connection with room in its
// socket buffer they finish in the call, saving the hand-off both ways. The descriptor's
// `busy` count keeps the fd open during that call; the poller closes fds, and only when busy
// is zero. Cancellation is IORING_OP_ASYNC_CANCEL by user_data.
//
// Multishot accept and receive live in uring_multishot.cpp; what they add to this picture is
// described there.
//
// Start-up probes the opcodes used and the features relied on; anything missing makes
// create() fail, and "auto" then falls back to epoll. A kernel without buffer rings, or one
// that rejects a multishot operation with -EINVAL, gets single-shot operations instead.
#pragma once

#include <liburing.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "arbor/io/engine.hpp"
#include "arbor/io/submit_batch.hpp"
#include "descriptor.hpp"
#include "provided_buffers.hpp"

namespace arbor::io::uring {

// CQE user data: an Operation* (single-shot), or one of these. Operations and descriptors are
// at least 8-byte aligned, so a descriptor tagged with kMultishotTag cannot collide.
constexpr std::uint64_t kIgnore = 0;        // cancel requests
constexpr std::uint64_t kWakeRead = 1;      // the eventfd read
constexpr std::uint64_t kMultishotTag = 2;  // Descriptor* | 2: the socket's multishot operation

enum LinkKind : std::uint8_t {
  kStart = 1,
  kCancelRead = 2,
  kCancelWrite = 3,
  kClose = 4,
  kArm = 5
};

// Operation::stage of a reader waiting in its slot for the socket's multishot operation.
constexpr std::uint32_t kParked = 0x4d53;

constexpr unsigned kBufferCount = 1024;  // per ring
constexpr unsigned kBufferSize = 4096;
constexpr std::uint32_t kMaxChunks = 16;  // per socket: 64 KiB buffered at most
constexpr std::size_t kMaxAccepted = 64;  // per listener

inline std::uint64_t multishot_data(Descriptor& d) noexcept {
  return reinterpret_cast<std::uintptr_t>(&d) | kMultishotTag;
}

inline Operation* op_of_start(Operation::Link* l) noexcept {
  return operation_of(l);
}
inline Descriptor* descriptor_of_cancel(Operation::Link* l, int side) noexcept {
  return reinterpret_cast<Descriptor*>(reinterpret_cast<char*>(l - side) -
                                       offsetof(Descriptor, cancel_link));
}
inline Descriptor* descriptor_of_close(Operation::Link* l) noexcept {
  return reinterpret_cast<Descriptor*>(reinterpret_cast<char*>(l) -
                                       offsetof(Descriptor, close_link));
}
inline Descriptor* descriptor_of_arm(Operation::Link* l) noexcept {
  return reinterpret_cast<Descriptor*>(reinterpret_cast<char*>(l) - offsetof(Descriptor, arm_link));
}

/// Prepares `op` as a single-shot SQE on `fd` (user data: the operation).
void prepare(io_uring_sqe* sqe, Operation& op, int fd) noexcept;

/// The handle a multishot accept produced, as accept(2) would return it (uring_multishot.cpp).
std::int64_t finish_accept(Operation& op, std::int64_t handle) noexcept;

struct Ring {
  io_uring ring{};
  bool initialised = false;
  int eventfd = -1;
  std::uint64_t eventfd_value = 0;
  bool wake_read_posted = false;  // poller thread only
  // Requests from other threads, newest first. seq_cst with `sleeping` (see the file comment).
  std::atomic<Operation::Link*> incoming{nullptr};
  std::atomic<bool> sleeping{false};
  std::atomic<std::uint64_t>* wakes = nullptr;
  std::atomic<std::uint64_t>* submits = nullptr;
  ProvidedBuffers buffers;  // freed after ~Ring's body has exited the ring (which unregisters it)
  bool multishot = false;   // buffers registered: this ring may run multishot operations

  ~Ring() {
    if (initialised) io_uring_queue_exit(&ring);
    if (eventfd >= 0) ::close(eventfd);
  }

  /// Pushes a request; returns true if the stack was empty (the poller may need waking).
  bool push(Operation::Link& link) noexcept {
    Operation::Link* head = incoming.load(std::memory_order_relaxed);
    do {
      link.next = head;
    } while (!incoming.compare_exchange_weak(head, &link, std::memory_order_seq_cst,
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

  /// After a push: wake the poller now, or at the end of the current SubmitBatch.
  void notify() noexcept {
    if (!SubmitBatch::defer(&Ring::wake_if_sleeping, this)) wake_if_sleeping(this);
  }

  /// Poller thread: an SQE, submitting what is queued first if the SQ is full.
  io_uring_sqe* get_sqe() noexcept {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    while (sqe == nullptr) {
      submits->fetch_add(1, std::memory_order_relaxed);
      io_uring_submit(&ring);
      sqe = io_uring_get_sqe(&ring);
    }
    return sqe;
  }
};

class UringEngine final : public Engine {
 public:
  UringEngine(sched::Scheduler& scheduler, const EngineOptions& options)
      : Engine(scheduler, options), rings_(static_cast<std::size_t>(options.pollers)) {}
  ~UringEngine() override;
  /// Sets up the rings (probing features, falling back as the file comment says) and starts
  /// the pollers.
  std::error_code init();

  const char* name() const noexcept override { return "uring"; }
  const char* mode() const noexcept { return mode_; }
  /// For the start-up line: single-shot or multishot operations, and why.
  std::string operations() const;

  Result<DescriptorRef> attach(Handle handle) noexcept override;
  bool start(Operation& op) noexcept override;
  void cancel(Operation& op) noexcept override;
  void close(DescriptorRef socket) noexcept override;

 protected:
  void cancel_parked() noexcept override;
  std::size_t wait(int poller, std::int64_t timeout_ns,
                   std::span<sched::Event> out) noexcept override;
  void wake(int poller) noexcept override { rings_[static_cast<std::size_t>(poller)]->wake_now(); }
  void on_poller_start(int poller) noexcept override;
  void on_poller_stop(int poller) noexcept override;

 private:
  // --- core (uring_engine.cpp) -------------------------------------------------------------
  Ring& ring_of(const Descriptor& d) noexcept {
    return *rings_[static_cast<std::size_t>(d.poller)];
  }
  std::error_code setup(Ring& r);
  // Under d.lock: whether op may start (its socket open, its name current, not cancelled, its
  // side free); if not, its inline result is set.
  bool admit(Descriptor& d, Operation& op, int side) const noexcept;
  // Under d.lock: occupy the slot and hand the start to the poller (in lock order).
  static void queue_start(Ring& ring, Descriptor& d, Operation& op, int side) noexcept;
  // Under d.lock: a close that waited for `busy` to drain goes to the poller now. True if it
  // pushed the request: the caller must then notify the poller once it unlocks.
  [[nodiscard]] static bool queue_close_if_due(Ring& ring, Descriptor& d) noexcept;
  // Poller thread: turn every queued request into SQEs (or, for a closed socket, complete it).
  void drain(Ring& r) noexcept;
  // A queued start whose socket was closed (or which was cancelled) before it reached the
  // ring: complete it as if the kernel had cancelled it.
  void finish_refused(Operation& op) noexcept;
  // Poller thread: cancel the socket's operations, submit, then close(2) its fd.
  void close_now(Ring& r, Descriptor& d) noexcept;
  // A CQE for op: free its slot, then complete it (the slot must be free first so the
  // resumed coroutine can start its next operation on this side).
  static void complete(const sched::Event& event, sched::Disposition) noexcept;

  // --- multishot, worker side (uring_multishot.cpp) ----------------------------------------
  bool start_multishot_accept(Ring& ring, Descriptor& d, Operation& op) noexcept;
  bool start_multishot_receive(Ring& ring, Descriptor& d, Operation& op) noexcept;
  // Under d.lock: op waits in its slot for the multishot operation's next result.
  static void park(Descriptor& d, Operation& op) noexcept;
  static Operation* parked(Descriptor& d) noexcept;
  // Under d.lock: ask the poller to arm the socket's multishot operation unless it runs or is
  // about to. True if a request was pushed (the caller notifies the poller after unlocking).
  static bool request_arm(Ring& ring, Descriptor& d, OpKind kind) noexcept;
  // Under d.lock: moves buffered bytes into op's buffer, oldest first, and hands each buffer
  // it empties to `done`. Returns the bytes moved.
  template <class Done>
  static std::size_t take_chunks(ProvidedBuffers& buffers, Descriptor& d, Operation& op,
                                 Done&& done) noexcept;
  // Under d.lock: the final result the multishot receive ended with. End of stream stays (every
  // later read sees it, as with recv(2)); an error is reported once.
  static std::int64_t take_end(Descriptor& d) noexcept;

  // --- multishot, poller side (uring_multishot.cpp) ----------------------------------------
  // Under d.lock: submit the socket's multishot operation.
  void arm(Ring& r, Descriptor& d) noexcept;
  // Under d.lock: stop the socket's multishot operation (its last CQE clears multishot_armed).
  static void stop_multishot(Ring& r, Descriptor& d) noexcept;
  // A kernel that rejects the multishot opcode variant: log once, use single-shot from now on.
  void unsupported(std::atomic<bool>& flag, const char* what) noexcept;
  // One CQE of a socket's multishot operation. Returns true if it completed the waiting reader,
  // with the event for it in `event`.
  bool on_multishot(Ring& r, Descriptor& d, int res, unsigned flags, sched::Event& event) noexcept;
  // Under d.lock: keep an accepted handle for the next accept; stop accepting when enough wait.
  void store_accepted(Ring& r, Descriptor& d, Handle handle, bool more, Handle& orphan) noexcept;
  // Under d.lock: append a received buffer to the socket's chunk list.
  static void append_chunk(ProvidedBuffers& buffers, Descriptor& d, std::uint16_t id,
                           std::uint32_t length) noexcept;
  // A reader the poller took out of its slot (so these do not touch the slot again).
  void deliver_claimed(Operation& op, std::int64_t result) noexcept;
  static void complete_claimed(const sched::Event& event, sched::Disposition) noexcept;
  static void complete_accepted(const sched::Event& event, sched::Disposition) noexcept;

  std::vector<std::unique_ptr<Ring>> rings_;
  DescriptorPool pool_;
  // Cleared (for good) when the kernel turns out not to support them.
  std::atomic<bool> multishot_accept_{options().multishot};
  std::atomic<bool> multishot_receive_{options().multishot};
  std::string multishot_note_;
  bool needs_enable_ = false;
  const char* mode_ = "basic";
};

}  // namespace arbor::io::uring
