// UringEngine: the completion backend (Linux io_uring through liburing).
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
// Multishot (where the kernel has it): a listener's accepts and a stream socket's receives run
// as one multishot operation each, armed when a reader first waits. Its CQEs name the
// descriptor rather than an operation; the poller hands each result straight to the waiting
// reader (copying received bytes out of the provided buffer into the reader's span) or keeps
// it in the descriptor, where the next read or accept takes it on the worker without any
// hand-off. A reader that finds nothing parks in its slot without a request to the poller while
// the multishot is armed. Buffering is bounded: a socket holding kMaxChunks buffers, or a
// listener holding kMaxAccepted handles, has its multishot cancelled until its reader catches
// up (TCP flow control and the listen backlog then hold the rest). An empty buffer ring
// (-ENOBUFS) makes that one read a single-shot receive into the reader's own buffer.
//
// Start-up probes the opcodes used and the features relied on; anything missing makes
// create() fail, and "auto" then falls back to epoll. A kernel without buffer rings, or one
// that rejects a multishot operation with -EINVAL, gets single-shot operations instead.
#include <liburing.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "arbor/io/engine.hpp"
#include "arbor/io/log.hpp"
#include "arbor/io/submit_batch.hpp"
#include "descriptor.hpp"
#include "provided_buffers.hpp"

namespace arbor::io {
namespace {

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

std::uint64_t multishot_data(Descriptor& d) noexcept {
  return reinterpret_cast<std::uintptr_t>(&d) | kMultishotTag;
}

Operation* op_of_start(Operation::Link* l) noexcept {
  return reinterpret_cast<Operation*>(reinterpret_cast<char*>(l) - offsetof(Operation, start_link));
}
Descriptor* descriptor_of_cancel(Operation::Link* l, int side) noexcept {
  return reinterpret_cast<Descriptor*>(reinterpret_cast<char*>(l - side) -
                                       offsetof(Descriptor, cancel_link));
}
Descriptor* descriptor_of_close(Operation::Link* l) noexcept {
  return reinterpret_cast<Descriptor*>(reinterpret_cast<char*>(l) -
                                       offsetof(Descriptor, close_link));
}
Descriptor* descriptor_of_arm(Operation::Link* l) noexcept {
  return reinterpret_cast<Descriptor*>(reinterpret_cast<char*>(l) - offsetof(Descriptor, arm_link));
}

// The handle a multishot accept produced, as accept(2) would return it: the peer address is
// filled in if asked for. A peer gone before we asked counts as an aborted connection.
std::int64_t finish_accept(Operation& op, std::int64_t handle) noexcept {
  if (handle < 0 || op.address == nullptr) return handle;
  auto size = static_cast<socklen_t>(Address::capacity());
  if (::getpeername(static_cast<int>(handle), static_cast<sockaddr*>(op.address->native()), &size) <
      0) {
    ::close(static_cast<int>(handle));
    return -ECONNABORTED;
  }
  return handle;
}

void prepare(io_uring_sqe* sqe, Operation& op, int fd) noexcept {
  switch (op.kind) {
    case OpKind::receive:
      io_uring_prep_recv(sqe, fd, op.data, op.size, 0);
      break;
    case OpKind::send:
      io_uring_prep_send(sqe, fd, op.data, op.size, MSG_NOSIGNAL);
      break;
    case OpKind::send_vectored: {
      auto* m = new (op.scratch) msghdr{};
      m->msg_iov = static_cast<iovec*>(op.data);
      m->msg_iovlen = op.size;
      io_uring_prep_sendmsg(sqe, fd, m, MSG_NOSIGNAL);
      break;
    }
    case OpKind::accept:
      op.address_size = Address::capacity();
      io_uring_prep_accept(sqe, fd,
                           op.address ? static_cast<sockaddr*>(op.address->native()) : nullptr,
                           op.address ? reinterpret_cast<socklen_t*>(&op.address_size) : nullptr,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
      break;
    case OpKind::connect:
      io_uring_prep_connect(sqe, fd, static_cast<const sockaddr*>(op.address->native()),
                            op.address->native_size());
      break;
    case OpKind::receive_from:
    case OpKind::send_to: {
      static_assert(sizeof(msghdr) + sizeof(iovec) <= sizeof(Operation::scratch));
      auto* m = new (op.scratch) msghdr{};
      auto* iov = new (op.scratch + sizeof(msghdr)) iovec{op.data, op.size};
      m->msg_iov = iov;
      m->msg_iovlen = 1;
      if (op.address != nullptr) {
        m->msg_name = op.address->native();
        m->msg_namelen =
            op.kind == OpKind::send_to ? op.address->native_size() : Address::capacity();
      }
      if (op.kind == OpKind::send_to)
        io_uring_prep_sendmsg(sqe, fd, m, MSG_NOSIGNAL);
      else
        io_uring_prep_recvmsg(sqe, fd, m, 0);
      break;
    }
  }
  io_uring_sqe_set_data(sqe, &op);
}

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

  std::error_code init() {
    for (auto& r : rings_) {
      r = std::make_unique<Ring>();
      r->wakes = &wakes_;
      r->submits = &submits_;
      r->eventfd = ::eventfd(0, EFD_CLOEXEC);
      if (r->eventfd < 0) return {errno, std::system_category()};
      if (auto e = setup(*r)) return e;
    }
    start_pollers();
    return {};
  }

  ~UringEngine() override {
    stop();
    // Sockets still open now were never closed by their owners (or closed after the pollers
    // stopped): the engine owns their descriptors, so it closes them. Exiting the rings then
    // cancels whatever the kernel still has in flight.
    pool_.for_each([this](Descriptor& d) {
      std::lock_guard guard(d.lock);
      for (std::size_t i = d.accepted_head; i < d.accepted.size(); ++i)
        ::close(static_cast<int>(d.accepted[i]));
      d.accepted.clear();
      if (d.fd_closed || d.fd == kInvalidHandle) return;
      d.fd_closed = true;
      ::close(static_cast<int>(d.fd));
      descriptors_.fetch_sub(1, std::memory_order_relaxed);
    });
  }

  const char* name() const noexcept override { return "uring"; }
  const char* mode() const noexcept { return mode_; }
  std::string operations() const {
    if (!options().multishot) return "single-shot operations (ARBOR_MULTISHOT=0)";
    if (!multishot_note_.empty())
      return "single-shot operations (no buffer rings: " + multishot_note_ + ")";
    return "multishot accept and receive (" + std::to_string(kBufferCount) + " x " +
           std::to_string(kBufferSize / 1024) + " KiB buffers per ring)";
  }

  Result<Descriptor*> attach(Handle handle) noexcept override {
    auto adopted = pool_.adopt(handle, rings_.size());
    if (!adopted) return adopted;
    descriptors_.fetch_add(1, std::memory_order_relaxed);
    Descriptor& d = **adopted;
    if (ring_of(d).multishot) {
      int type = 0;
      socklen_t size = sizeof type;
      const bool stream =
          ::getsockopt(static_cast<int>(handle), SOL_SOCKET, SO_TYPE, &type, &size) == 0 &&
          type == SOCK_STREAM;
      std::lock_guard guard(d.lock);
      d.stream = stream;
    }
    return adopted;
  }

  bool start(Operation& op) noexcept override {
    Descriptor& d = *op.descriptor;
    const int side = Descriptor::side(op.kind);
    Ring& ring = ring_of(d);
    if (ring.multishot && op.kind == OpKind::accept) return start_multishot_accept(ring, d, op);
    if (ring.multishot && op.kind == OpKind::receive && op.size > 0)
      return start_multishot_receive(ring, d, op);
    if (op.kind == OpKind::send || op.kind == OpKind::send_vectored) {
      {
        std::lock_guard guard(d.lock);
        if (!admit(d, op, side)) return true;
        ++d.busy;  // keeps the fd open while the system call runs outside the lock
      }
      const std::int64_t r = perform(op, d.fd);
      bool queued = false;
      {
        std::lock_guard guard(d.lock);
        --d.busy;
        if (r == -EAGAIN && !d.closed && !cancelling() &&
            !op.cancel_requested.load(std::memory_order_relaxed)) {
          queue_start(ring, d, op, side);
          queued = true;
        } else {
          queue_close_if_due(ring, d);
        }
      }
      if (queued) {
        ring.notify();
        return false;
      }
      op.result = r == -EAGAIN ? -ECANCELED : r;
      return true;
    }
    {
      std::lock_guard guard(d.lock);
      if (!admit(d, op, side)) return true;
      queue_start(ring, d, op, side);
    }
    ring.notify();
    return false;
  }

  void cancel(Operation& op) noexcept override {
    Descriptor& d = *op.descriptor;
    Ring& ring = ring_of(d);
    const int side = Descriptor::side(op.kind);
    {
      std::lock_guard guard(d.lock);
      op.cancel_requested.store(true, std::memory_order_relaxed);
      // Not pending (finished, or never started): nothing to do. A start still in the queue
      // sees cancel_requested when the poller reaches it.
      // Closed: the close request already cancels it (and no cancel request may follow a
      // close in the queue, or it could outlive the recycled descriptor).
      if (d.closed || d.slot[side] != &op || d.cancel_queued[side]) return;
      d.cancel_queued[side] = true;
      d.cancel_link[side].kind = side == 0 ? kCancelRead : kCancelWrite;
      ring.push(d.cancel_link[side]);
    }
    ring.wake_if_sleeping(&ring);  // cancellation is rare and should be prompt: no deferral
  }

  void close(Descriptor* d) noexcept override {
    Ring& ring = ring_of(*d);
    {
      std::lock_guard guard(d->lock);
      if (d->closed) return;
      d->closed = true;
      d->close_queued = true;
      d->close_link.kind = kClose;
      ring.push(d->close_link);
    }
    ring.wake_if_sleeping(&ring);
  }

 protected:
  void cancel_parked() noexcept override {
    pool_.for_each([this](Descriptor& d) {
      std::lock_guard guard(d.lock);
      if (d.closed) return;  // its close request cancels its operations
      for (int side = 0; side < 2; ++side) {
        Operation* op = d.slot[side];
        if (op == nullptr) continue;
        op->cancel_requested.store(true, std::memory_order_relaxed);
        if (d.cancel_queued[side]) continue;  // the queued request will see the flag
        d.cancel_queued[side] = true;
        d.cancel_link[side].kind = side == 0 ? kCancelRead : kCancelWrite;
        ring_of(d).push(d.cancel_link[side]);
      }
    });
    for (auto& r : rings_)
      r->wake_now();
  }

  std::size_t wait(int poller, std::int64_t timeout_ns,
                   std::span<sched::Event> out) noexcept override {
    Ring& r = *rings_[static_cast<std::size_t>(poller)];
    if (!r.wake_read_posted) {
      io_uring_sqe* sqe = r.get_sqe();
      io_uring_prep_read(sqe, r.eventfd, &r.eventfd_value, sizeof r.eventfd_value, 0);
      io_uring_sqe_set_data64(sqe, kWakeRead);
      r.wake_read_posted = true;
    }
    // Drain requests; announce sleep; drain again if something arrived meanwhile.
    for (;;) {
      drain(r);
      r.buffers.publish();  // buffers workers gave back, before the kernel needs them
      r.sleeping.store(true, std::memory_order_seq_cst);
      if (r.incoming.load(std::memory_order_seq_cst) == nullptr) break;
      r.sleeping.store(false, std::memory_order_relaxed);
    }
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec ts{};
    if (timeout_ns >= 0) {
      ts.tv_sec = timeout_ns / 1'000'000'000;
      ts.tv_nsec = timeout_ns % 1'000'000'000;
    }
    if (io_uring_sq_ready(&r.ring) > 0) submits_.fetch_add(1, std::memory_order_relaxed);
    const int e = io_uring_submit_and_wait_timeout(&r.ring, &cqe, 1,
                                                   timeout_ns >= 0 ? &ts : nullptr, nullptr);
    r.sleeping.store(false, std::memory_order_relaxed);
    if (e < 0 && e != -ETIME && e != -EINTR && e != -EAGAIN && e != -EBUSY)
      log::error("io_uring wait failed: {}", std::strerror(-e));
    io_uring_cqe* cqes[512];
    const unsigned max = static_cast<unsigned>(std::min<std::size_t>(out.size(), std::size(cqes)));
    const unsigned n = io_uring_peek_batch_cqe(&r.ring, cqes, max);
    std::size_t count = 0;
    for (unsigned i = 0; i < n; ++i) {
      const std::uint64_t data = io_uring_cqe_get_data64(cqes[i]);
      if (data == kIgnore) continue;
      if (data == kWakeRead) {
        r.wake_read_posted = false;
        continue;
      }
      if ((data & 7) == kMultishotTag) {
        auto& d = *reinterpret_cast<Descriptor*>(static_cast<std::uintptr_t>(data & ~7ull));
        if (on_multishot(r, d, cqes[i]->res, cqes[i]->flags, out[count])) ++count;
        continue;
      }
      out[count++] = {&complete, reinterpret_cast<Operation*>(static_cast<std::uintptr_t>(data)),
                      cqes[i]->res, reinterpret_cast<std::uintptr_t>(this)};
    }
    io_uring_cq_advance(&r.ring, n);
    r.buffers.publish();
    return count;
  }

  void wake(int poller) noexcept override { rings_[static_cast<std::size_t>(poller)]->wake_now(); }

 private:
  // --- multishot, worker side ------------------------------------------------------------

  bool start_multishot_accept(Ring& ring, Descriptor& d, Operation& op) noexcept {
    Handle ready = kInvalidHandle;
    bool pushed = false;
    {
      std::lock_guard guard(d.lock);
      if (!admit(d, op, 0)) return true;
      if (d.accepted_head < d.accepted.size()) {
        ready = d.accepted[d.accepted_head++];
        if (d.accepted_head == d.accepted.size()) {
          d.accepted.clear();  // keeps its capacity: no allocation in steady state
          d.accepted_head = 0;
        }
      } else if (!multishot_accept_.load(std::memory_order_relaxed)) {
        queue_start(ring, d, op, 0);
        pushed = true;
      } else {
        park(d, op);
        pushed = request_arm(ring, d, OpKind::accept);
      }
    }
    if (ready != kInvalidHandle) {
      buffered_reads_.fetch_add(1, std::memory_order_relaxed);
      op.result = finish_accept(op, ready);
      return true;
    }
    if (pushed) ring.notify();
    return false;
  }

  bool start_multishot_receive(Ring& ring, Descriptor& d, Operation& op) noexcept {
    bool pushed = false;
    {
      std::lock_guard guard(d.lock);
      if (!admit(d, op, 0)) return true;
      if (d.chunk_head != ProvidedBuffers::kNone) {
        op.result = static_cast<std::int64_t>(take_chunks(
            ring.buffers, d, op, [&](std::uint16_t id) { ring.buffers.give_back(id); }));
        buffered_reads_.fetch_add(1, std::memory_order_relaxed);
        return true;
      } else if (d.has_end) {
        op.result = take_end(d);
        return true;
      } else if (!d.stream || !multishot_receive_.load(std::memory_order_relaxed)) {
        queue_start(ring, d, op, 0);  // datagrams keep their boundaries: single-shot
        pushed = true;
      } else {
        park(d, op);
        pushed = request_arm(ring, d, OpKind::receive);
      }
    }
    if (pushed) ring.notify();
    return false;
  }

  // Under d.lock: op waits in its slot for the multishot operation's next result.
  static void park(Descriptor& d, Operation& op) noexcept {
    d.slot[0] = &op;
    op.stage = kParked;
  }
  static Operation* parked(Descriptor& d) noexcept {
    Operation* op = d.slot[0];
    return op != nullptr && op->stage == kParked ? op : nullptr;
  }

  // Under d.lock: ask the poller to arm the socket's multishot operation unless it runs or is
  // about to. True if a request was pushed (the caller notifies the poller after unlocking).
  static bool request_arm(Ring& ring, Descriptor& d, OpKind kind) noexcept {
    if (d.multishot_armed || d.arm_queued) return false;
    d.arm_queued = true;
    d.arm_kind = kind;
    d.arm_link.kind = kArm;
    ring.push(d.arm_link);
    return true;
  }

  // Under d.lock: moves buffered bytes into op's buffer, oldest first, and hands each buffer
  // it empties to `done`. Returns the bytes moved.
  template <class Done>
  static std::size_t take_chunks(ProvidedBuffers& buffers, Descriptor& d, Operation& op,
                                 Done&& done) noexcept {
    std::size_t moved = 0;
    auto* out = static_cast<std::byte*>(op.data);
    while (d.chunk_head != ProvidedBuffers::kNone && moved < op.size) {
      const std::uint16_t id = d.chunk_head;
      std::uint32_t& offset = buffers.offset(id);
      const std::size_t n = std::min<std::size_t>(buffers.length(id) - offset, op.size - moved);
      std::memcpy(out + moved, buffers.data(id) + offset, n);
      moved += n;
      offset += static_cast<std::uint32_t>(n);
      if (offset < buffers.length(id)) break;
      d.chunk_head = buffers.next(id);
      if (d.chunk_head == ProvidedBuffers::kNone) d.chunk_tail = ProvidedBuffers::kNone;
      --d.chunk_count;
      done(id);
    }
    return moved;
  }

  // Under d.lock: the final result the multishot receive ended with. End of stream stays (every
  // later read sees it, as with recv(2)); an error is reported once.
  static std::int64_t take_end(Descriptor& d) noexcept {
    const std::int64_t r = d.end_result;
    if (r < 0) d.has_end = false;
    return r;
  }

  // --- multishot, poller side ------------------------------------------------------------

  // Under d.lock: submit the socket's multishot operation.
  void arm(Ring& r, Descriptor& d) noexcept {
    multishot_arms_.fetch_add(1, std::memory_order_relaxed);
    d.multishot_armed = true;
    d.throttled = false;
    const int fd = static_cast<int>(d.fd);
    io_uring_sqe* sqe = r.get_sqe();
    if (d.arm_kind == OpKind::accept) {
      io_uring_prep_multishot_accept(sqe, fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    } else {
      io_uring_prep_recv_multishot(sqe, fd, nullptr, 0, 0);
      sqe->flags |= IOSQE_BUFFER_SELECT;
      sqe->buf_group = ProvidedBuffers::kGroup;
    }
    io_uring_sqe_set_data64(sqe, multishot_data(d));
  }

  // Under d.lock: stop the socket's multishot operation (its last CQE clears multishot_armed).
  static void stop_multishot(Ring& r, Descriptor& d) noexcept {
    d.throttled = true;
    io_uring_sqe* sqe = r.get_sqe();
    io_uring_prep_cancel64(sqe, multishot_data(d), 0);
    io_uring_sqe_set_data64(sqe, kIgnore);
  }

  // A kernel that rejects the multishot opcode variant: log once, use single-shot from now on.
  void unsupported(std::atomic<bool>& flag, const char* what) noexcept {
    if (flag.exchange(false, std::memory_order_relaxed))
      log::warn("io_uring: multishot {} is not supported here; using single-shot", what);
  }

  // One CQE of a socket's multishot operation. Returns true if it completed the waiting reader,
  // with the event for it in `event`.
  bool on_multishot(Ring& r, Descriptor& d, int res, unsigned flags, sched::Event& event) noexcept {
    Operation* claimed = nullptr;
    std::int64_t result = 0;
    Handle orphan = kInvalidHandle;
    bool release = false;
    bool accepting;
    {
      std::lock_guard guard(d.lock);
      accepting = d.arm_kind == OpKind::accept;
      const bool more = (flags & IORING_CQE_F_MORE) != 0;
      if (!more) d.multishot_armed = false;
      Operation* op = parked(d);
      bool single_shot = false;  // the reader falls back to a single-shot operation
      if (accepting) {
        if (res >= 0 && d.closed) {
          orphan = res;
        } else if (res >= 0 && op != nullptr) {
          claimed = op;
          result = res;
        } else if (res >= 0) {
          store_accepted(r, d, res, more, orphan);
        } else if (res == -EINVAL) {
          unsupported(multishot_accept_, "accept");
          single_shot = true;
        } else if (res != -ECANCELED && op != nullptr) {
          claimed = op;  // e.g. EMFILE: the caller backs off
          result = res;
        }
      } else {
        if (flags & IORING_CQE_F_BUFFER) {
          const auto id = static_cast<std::uint16_t>(flags >> IORING_CQE_BUFFER_SHIFT);
          if (res > 0 && !d.closed)
            append_chunk(r.buffers, d, id, static_cast<std::uint32_t>(res));
          else
            r.buffers.recycle(id);
        } else if (res == 0) {
          d.has_end = true;
          d.end_result = 0;
        } else if (res == -EINVAL) {
          unsupported(multishot_receive_, "receive");
          single_shot = true;
        } else if (res == -ENOBUFS) {
          single_shot = true;  // the ring is empty until readers give buffers back
        } else if (res < 0 && res != -ECANCELED) {
          d.has_end = true;
          d.end_result = res;
        }
        if (op != nullptr && d.chunk_head != ProvidedBuffers::kNone) {
          claimed = op;
          result = static_cast<std::int64_t>(
              take_chunks(r.buffers, d, *op, [&](std::uint16_t id) { r.buffers.recycle(id); }));
        } else if (op != nullptr && d.has_end) {
          claimed = op;
          result = take_end(d);
        }
        if (more && !d.throttled && d.chunk_count >= kMaxChunks) stop_multishot(r, d);
      }
      if (claimed != nullptr) {
        d.slot[0] = nullptr;
      } else if (op != nullptr && !d.multishot_armed && !d.closed) {
        if (single_shot) {
          op->stage = 0;  // completes through complete(), which frees the slot
          prepare(r.get_sqe(), *op, static_cast<int>(d.fd));
        } else {
          arm(r, d);
        }
      }
      release = !more && d.closed && d.fd_closed && d.idle();
    }
    if (orphan != kInvalidHandle) ::close(static_cast<int>(orphan));
    if (release) pool_.release(&d);
    if (claimed == nullptr) return false;
    event = {accepting ? &complete_accepted : &complete_claimed, claimed, result,
             reinterpret_cast<std::uintptr_t>(this)};
    return true;
  }

  // Under d.lock: keep an accepted handle for the next accept; stop accepting when enough wait.
  void store_accepted(Ring& r, Descriptor& d, Handle handle, bool more, Handle& orphan) noexcept {
    try {
      d.accepted.push_back(handle);
    } catch (const std::bad_alloc&) {
      orphan = handle;  // cannot keep it: the peer sees a reset rather than a hang
      log::error("io_uring: out of memory queueing an accepted connection; closed it");
      return;
    }
    if (more && !d.throttled && d.accepted.size() - d.accepted_head >= kMaxAccepted)
      stop_multishot(r, d);
  }

  static void append_chunk(ProvidedBuffers& buffers, Descriptor& d, std::uint16_t id,
                           std::uint32_t length) noexcept {
    buffers.length(id) = length;
    buffers.offset(id) = 0;
    buffers.next(id) = ProvidedBuffers::kNone;
    if (d.chunk_tail == ProvidedBuffers::kNone)
      d.chunk_head = id;
    else
      buffers.next(d.chunk_tail) = id;
    d.chunk_tail = id;
    ++d.chunk_count;
  }

  // A reader the poller took out of its slot (so these do not touch the slot again).
  void deliver_claimed(Operation& op, std::int64_t result) noexcept {
    const sched::Event event{&complete_claimed, &op, result,
                             reinterpret_cast<std::uintptr_t>(this)};
    deliver({&event, 1});
  }
  static void complete_claimed(const sched::Event& event, sched::Disposition) noexcept {
    auto* op = static_cast<Operation*>(event.target);
    SubmitBatch batch;
    op->complete(*op, event.result);
  }
  static void complete_accepted(const sched::Event& event, sched::Disposition) noexcept {
    auto* op = static_cast<Operation*>(event.target);
    const std::int64_t result = finish_accept(*op, event.result);
    SubmitBatch batch;
    op->complete(*op, result);
  }

  Ring& ring_of(const Descriptor& d) noexcept {
    return *rings_[static_cast<std::size_t>(d.poller)];
  }

  std::error_code setup(Ring& r) {
    // Preferred: a ring owned by one thread, enabled by that thread when it starts polling.
    // Then progressively older setups.
    struct Attempt {
      unsigned flags;
      const char* mode;
    };
    const Attempt attempts[] = {
        {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED,
         "single-issuer, deferred task work"},
        {IORING_SETUP_COOP_TASKRUN, "cooperative task work"},
        {0, "basic"},
    };
    int e = -EINVAL;
    for (const auto& a : attempts) {
      io_uring_params params{};
      params.flags = a.flags | IORING_SETUP_CLAMP;
      e = io_uring_queue_init_params(options().ring_entries, &r.ring, &params);
      if (e < 0) continue;
      r.initialised = true;
      needs_enable_ = (a.flags & IORING_SETUP_R_DISABLED) != 0;
      mode_ = a.mode;
      constexpr unsigned kNeeded = IORING_FEAT_NODROP | IORING_FEAT_EXT_ARG;
      if ((params.features & kNeeded) != kNeeded)
        return std::make_error_code(std::errc::function_not_supported);
      break;
    }
    if (e < 0) return {-e, std::system_category()};
    io_uring_probe* probe = io_uring_get_probe_ring(&r.ring);
    if (probe == nullptr) return std::make_error_code(std::errc::function_not_supported);
    bool ok = true;
    for (int opcode :
         {IORING_OP_READ, IORING_OP_RECV, IORING_OP_SEND, IORING_OP_SENDMSG, IORING_OP_RECVMSG,
          IORING_OP_ACCEPT, IORING_OP_CONNECT, IORING_OP_ASYNC_CANCEL})
      ok = ok && io_uring_opcode_supported(probe, opcode);
    io_uring_free_probe(probe);
    if (!ok) return std::make_error_code(std::errc::function_not_supported);
    if (options().multishot) {
      // Buffer rings (5.19) come with multishot accept; multishot receive (6.0) is checked by
      // its first use (-EINVAL turns it off).
      if (auto failed = r.buffers.init(r.ring, kBufferCount, kBufferSize)) {
        multishot_note_ = failed.message();
        multishot_accept_.store(false, std::memory_order_relaxed);
        multishot_receive_.store(false, std::memory_order_relaxed);
      } else {
        r.multishot = true;
      }
    }
    return {};
  }

  void on_poller_stop(int poller) noexcept override {
    Ring& r = *rings_[static_cast<std::size_t>(poller)];
    drain(r);  // closes requested before stop() close their descriptors now
    io_uring_submit(&r.ring);
  }

  void on_poller_start(int poller) noexcept override {
    if (!needs_enable_) return;
    // The submitter of a single-issuer ring is whoever enables it: this poller thread.
    // Raw syscall: Debian's liburing 2.3 declares io_uring_enable_rings() but does not export it.
    const int fd = rings_[static_cast<std::size_t>(poller)]->ring.ring_fd;
    if (::syscall(__NR_io_uring_register, fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0) < 0)
      log::error("io_uring: enabling the ring failed: {}", std::strerror(errno));
  }

  // Under d.lock: whether op may start; if not, its inline result is set.
  bool admit(Descriptor& d, Operation& op, int side) const noexcept {
    if (d.closed || op.cancel_requested.load(std::memory_order_relaxed) || cancelling()) {
      op.result = -ECANCELED;
      return false;
    }
    if (d.slot[side] != nullptr) {
      op.result = -EBUSY;
      return false;
    }
    return true;
  }

  // Under d.lock: occupy the slot and hand the start to the poller (in lock order).
  static void queue_start(Ring& ring, Descriptor& d, Operation& op, int side) noexcept {
    d.slot[side] = &op;
    op.start_link.kind = kStart;
    ring.push(op.start_link);
  }

  // Under d.lock: a close that waited for `busy` to drain goes to the poller now.
  static void queue_close_if_due(Ring& ring, Descriptor& d) noexcept {
    if (d.closed && d.busy == 0 && !d.fd_closed && !d.close_queued) {
      d.close_queued = true;
      d.close_link.kind = kClose;
      ring.push(d.close_link);
    }
  }

  // Poller thread: turn every queued request into SQEs (or, for a closed socket, complete it).
  void drain(Ring& r) noexcept {
    Operation::Link* list = r.incoming.exchange(nullptr, std::memory_order_acquire);
    Operation::Link* fifo = nullptr;
    while (list != nullptr) {  // reverse: requests in the order they were made
      Operation::Link* next = list->next;
      list->next = fifo;
      fifo = list;
      list = next;
    }
    while (fifo != nullptr) {
      Operation::Link* link = fifo;
      fifo = fifo->next;
      switch (link->kind) {
        case kStart: {
          Operation* op = op_of_start(link);
          Descriptor& d = *op->descriptor;
          bool refuse;
          {
            std::lock_guard guard(d.lock);
            refuse =
                d.closed || op->cancel_requested.load(std::memory_order_relaxed) || cancelling();
          }
          if (refuse) {
            finish_refused(*op);
          } else {
            prepare(r.get_sqe(), *op, static_cast<int>(d.fd));
          }
          break;
        }
        case kCancelRead:
        case kCancelWrite: {
          const int side = link->kind == kCancelRead ? 0 : 1;
          Descriptor& d = *descriptor_of_cancel(link, side);
          Operation* target;
          {
            // Cancel whatever is pending on that side now, if it asked to be cancelled: the
            // operation that asked may have finished since, and its successor (perhaps at the
            // same address) has its own cancel_requested, false unless it asked too.
            std::lock_guard guard(d.lock);
            d.cancel_queued[side] = false;
            target = d.slot[side];
            if (target != nullptr && !target->cancel_requested.load(std::memory_order_relaxed))
              target = nullptr;
          }
          if (target != nullptr && target->stage == kParked) {
            {
              std::lock_guard guard(d.lock);
              if (d.slot[side] == target)
                d.slot[side] = nullptr;
              else
                target = nullptr;  // its multishot result claimed it first
            }
            if (target != nullptr) deliver_claimed(*target, -ECANCELED);
          } else if (target != nullptr) {
            io_uring_sqe* sqe = r.get_sqe();
            io_uring_prep_cancel(sqe, target, 0);
            io_uring_sqe_set_data64(sqe, kIgnore);
          }
          break;
        }
        case kArm: {
          Descriptor& d = *descriptor_of_arm(link);
          std::lock_guard guard(d.lock);
          d.arm_queued = false;
          if (!d.closed && !d.multishot_armed) arm(r, d);
          break;
        }
        case kClose:
          close_now(r, *descriptor_of_close(link));
          break;
      }
    }
  }

  // A queued start whose socket was closed (or which was cancelled) before it reached the
  // ring: complete it as if the kernel had cancelled it.
  void finish_refused(Operation& op) noexcept {
    const sched::Event event{&complete, &op, -ECANCELED, reinterpret_cast<std::uintptr_t>(this)};
    deliver({&event, 1});
  }

  void close_now(Ring& r, Descriptor& d) noexcept {
    Operation* pending[2];
    Handle fd = kInvalidHandle;
    bool release = false;
    Operation* claimed = nullptr;
    std::vector<Handle> orphans;  // accepted, never taken (close is not a hot path)
    {
      std::lock_guard guard(d.lock);
      d.close_queued = false;
      claimed = parked(d);
      if (claimed != nullptr) d.slot[0] = nullptr;
      pending[0] = d.slot[0];
      pending[1] = d.slot[1];
      if (d.multishot_armed && !d.throttled) stop_multishot(r, d);
      while (d.chunk_head != ProvidedBuffers::kNone) {
        const std::uint16_t id = d.chunk_head;
        d.chunk_head = r.buffers.next(id);
        r.buffers.recycle(id);
      }
      d.chunk_tail = ProvidedBuffers::kNone;
      d.chunk_count = 0;
      d.has_end = false;
      orphans.swap(d.accepted);
      orphans.erase(orphans.begin(),
                    orphans.begin() + static_cast<std::ptrdiff_t>(d.accepted_head));
      d.accepted_head = 0;
      if (d.busy == 0 && !d.fd_closed) {
        d.fd_closed = true;
        fd = d.fd;
        release = d.idle();
      }
    }
    if (claimed != nullptr) deliver_claimed(*claimed, -ECANCELED);
    for (Handle h : orphans)
      ::close(static_cast<int>(h));
    for (Operation* op : pending) {
      if (op == nullptr) continue;
      io_uring_sqe* sqe = r.get_sqe();
      io_uring_prep_cancel(sqe, op, 0);
      io_uring_sqe_set_data64(sqe, kIgnore);
    }
    if (fd == kInvalidHandle) return;  // a worker is mid-send; it re-queues the close
    io_uring_submit(&r.ring);          // every SQE naming fd reaches the kernel before close(2)
    ::close(static_cast<int>(fd));
    descriptors_.fetch_sub(1, std::memory_order_relaxed);
    if (release) pool_.release(&d);
  }

  // A CQE for op: free its slot, then complete it (the slot must be free first so the
  // resumed coroutine can start its next operation on this side).
  static void complete(const sched::Event& event, sched::Disposition) noexcept {
    auto* op = static_cast<Operation*>(event.target);
    auto* self = reinterpret_cast<UringEngine*>(static_cast<std::uintptr_t>(event.data));
    Descriptor& d = *op->descriptor;
    bool release;
    {
      std::lock_guard guard(d.lock);
      d.slot[Descriptor::side(op->kind)] = nullptr;
      release = d.closed && d.fd_closed && d.idle();
    }
    if (release) self->pool_.release(&d);
    SubmitBatch batch;  // recvmsg already wrote a receive_from peer into op.address
    op->complete(*op, event.result);
  }

  std::vector<std::unique_ptr<Ring>> rings_;
  DescriptorPool pool_;
  // Cleared (for good) when the kernel turns out not to support them.
  std::atomic<bool> multishot_accept_{options().multishot};
  std::atomic<bool> multishot_receive_{options().multishot};
  std::string multishot_note_;
  bool needs_enable_ = false;
  const char* mode_ = "basic";
};

}  // namespace

Result<std::unique_ptr<Engine>> make_uring_engine(sched::Scheduler& scheduler,
                                                  const EngineOptions& options, bool announce) {
  auto engine = std::make_unique<UringEngine>(scheduler, options);
  if (auto ec = engine->init()) return ec;
  if (announce)
    log::info("engine: io_uring ({}), {} poller(s), batch {}, tree {}{}; {}", engine->mode(),
              options.pollers, options.max_batch, options.max_tree,
              options.inline_completions ? ", inline" : "", engine->operations());
  return std::unique_ptr<Engine>(std::move(engine));
}

}  // namespace arbor::io
