// UringEngine's core: the rings it makes, attaching sockets, starting, cancelling and closing
// operations, and the poller's drain and reap, the same in every io mode (engine.hpp).
#include "linux/uring/engine.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "arbor/internal/log.hpp"
#include "arbor/sync/timespec.hpp"
#include "common/engine_table.hpp"
#include "posix/socket_calls.hpp"

namespace arbor::io {
namespace uring {

void prepare(io_uring_sqe* sqe, Operation& op, int fd) noexcept {
  UringOp& state = state_of<UringOp>(op);
  state.in_ring.store(true, std::memory_order_relaxed);
  switch (op.kind) {
    case OpKind::receive:
      io_uring_prep_recv(sqe, fd, op.data, op.size, 0);
      break;
    case OpKind::send:
      io_uring_prep_send(sqe, fd, op.data, op.size, posix::kSendFlags);
      break;
    case OpKind::send_vectored:
      state.message = {};
      state.message.msg_iov = static_cast<iovec*>(op.data);
      state.message.msg_iovlen = op.size;
      io_uring_prep_sendmsg(sqe, fd, &state.message, posix::kSendFlags);
      break;
    case OpKind::accept:
      state.address_size = Address::capacity();
      io_uring_prep_accept(sqe, fd,
                           op.address ? static_cast<sockaddr*>(op.address->native()) : nullptr,
                           op.address ? &state.address_size : nullptr, posix::kAcceptFlags);
      break;
    case OpKind::connect:
      io_uring_prep_connect(sqe, fd, static_cast<const sockaddr*>(op.address->native()),
                            op.address->native_size());
      break;
    case OpKind::receive_from:
    case OpKind::send_to: {
      state.vector = {op.data, op.size};
      state.message = {};
      state.message.msg_iov = &state.vector;
      state.message.msg_iovlen = 1;
      if (op.address != nullptr) {
        state.message.msg_name = op.address->native();
        state.message.msg_namelen =
            op.kind == OpKind::send_to ? op.address->native_size() : Address::capacity();
      }
      if (op.kind == OpKind::send_to)
        io_uring_prep_sendmsg(sqe, fd, &state.message, posix::kSendFlags);
      else
        io_uring_prep_recvmsg(sqe, fd, &state.message, posix::kDatagramReceiveFlags);
      break;
    }
    case OpKind::readable:
      io_uring_prep_poll_add(sqe, fd, POLLIN);  // the mask it completes with becomes 0
      break;
  }
  io_uring_sqe_set_data(sqe, &op);
}

namespace {
// Rings mode has a ring per worker slot, spares included: a spare, started when every worker
// blocks in a region, is the ring the blocked ones lend their sockets to, and watches the
// timers (ring_per_worker.cpp). `options`: the engine's, whose io mode the Engine base filled in.
std::size_t ring_count(sched::Scheduler& scheduler, const EngineOptions& options) {
  if (options.io_mode == IoMode::rings) return static_cast<std::size_t>(scheduler.max_workers());
  return static_cast<std::size_t>(options.io_mode == IoMode::pollers ? options.pollers : 1);
}
}  // namespace

UringEngine::UringEngine(sched::Scheduler& scheduler, const EngineOptions& options)
    : EngineCore(scheduler, options), rings_(ring_count(scheduler, this->options())) {}

std::error_code UringEngine::init(bool attach) {
  const bool rings_mode = options().io_mode == IoMode::rings;
  for (auto& r : rings_) {
    r = std::make_unique<Ring>();
    r->index = static_cast<int>(&r - rings_.data());
    r->wakes = &wakes_;
    r->submits = &submits_;
    r->engine = this;
    // Not with inline completions: a flush would run handlers inside start(), before it
    // returns, and with the poll right held.
    if (options().io_mode == IoMode::workers && !options().inline_completions)
      r->polled_by = &scheduler();
    // Rings mode: a worker's ring is made here, enabled by its worker (open_ring()); until
    // then requests wait in its queue. A spare's is made by the spare itself, if one ever
    // starts. Made here, running out of descriptors or memory fails Engine::create() rather
    // than a worker's open() later (which would leave that ring's sockets, and with every ring
    // failing the timers too, with nobody to serve them).
    r->spare = rings_mode && r->index >= scheduler().workers();
    if (!r->spare)
      if (auto e = set_up(*r)) return e;
  }
  if (rings_mode) {
    try {
      worker_ring_drivers_.resize(rings_.size());
      for (std::size_t i = 0; i < rings_.size(); ++i)
        worker_ring_drivers_[i] = std::make_unique<WorkerRing>(
            *this, *rings_[i], static_cast<int>(i), options().max_batch);
    } catch (const std::bad_alloc&) {
      return std::make_error_code(std::errc::not_enough_memory);
    }
    if (!attach) return {};
  }
  return start_polling();
}

UringEngine::~UringEngine() {
  // The pollers are stopped (by the owner's deleter, engine.hpp). Sockets still open now were
  // never closed by their owners (or closed after the pollers stopped): the engine owns their
  // descriptors, so it closes them. Exiting the rings then cancels what the kernel has in flight.
  pool_.for_each([this](UringDescriptor& d) {
    std::lock_guard guard(d.lock);
    for (std::size_t i = d.accepted_head; i < d.accepted.size(); ++i)
      close_handle(d.accepted[i]);
    d.accepted.clear();
    if (d.close_if_open()) descriptors_.fetch_sub(1, std::memory_order_relaxed);
  });
}

std::string UringEngine::operations() const {
  if (!options().multishot) return "single-shot operations (ARBOR_MULTISHOT=0)";
  if (!multishot_receive_.load(std::memory_order_relaxed))
    return "single-shot operations (no buffer rings: see the warning above)";
  return "multishot accept and receive (up to " + std::to_string(kBufferCount) + " x " +
         std::to_string(kBufferSize / 1024) + " KiB buffers per ring)";
}

Result<DescriptorRef> UringEngine::attach(Handle handle) noexcept {
  if (int e = posix::make_non_blocking(handle); e != 0) {
    close_handle(handle);
    return errno_code(e);
  }
  return adopt(handle, options().multishot && posix::is_stream(handle));
}

Result<DescriptorRef> UringEngine::attach_stream(Handle handle) noexcept {
  return adopt(handle, options().multishot);
}

Result<DescriptorRef> UringEngine::adopt(Handle handle, bool stream) noexcept {
  auto adopted = pool_.adopt(handle, rings_.size());
  if (!adopted) return adopted;
  descriptors_.fetch_add(1, std::memory_order_relaxed);
  auto& d = descriptor_cast<UringDescriptor>(*adopted->descriptor);
  if (options().io_mode == IoMode::rings) place(d);
  {
    std::lock_guard guard(d.lock);
    d.stream = stream;
  }
  return adopted;
}

bool UringEngine::start(Operation& op) noexcept {
  auto& d = descriptor_of<UringDescriptor>(op);
  const int side = Descriptor::side(op.kind);
  const bool multishot = options().multishot;
  if (multishot && op.kind == OpKind::accept) return start_multishot_accept(d, op);
  if (multishot && ((op.kind == OpKind::receive && op.size > 0) || op.kind == OpKind::readable))
    return start_multishot_receive(d, op);
  Ring* ring = nullptr;  // read under d.lock: the socket may move (lend())
  if (op.kind == OpKind::send || op.kind == OpKind::send_vectored) {
    {
      std::lock_guard guard(d.lock);
      if (!admit_start(d, op)) return true;
      // The rule for sends (sends_through_ring()): the owner of the socket's ring queues it in
      // the ring when more is coming before its next wait, and that wait's io_uring_enter
      // submits it with the rest, so a batch of replies costs one system call, not one each.
      if (Ring& own = ring_of(d); sends_through_ring(own)) {
        queue_start(own, d, op, side);
        own.ring_sends.store(own.ring_sends.load(std::memory_order_relaxed) + 1,
                             std::memory_order_relaxed);
        return false;
      }
      ++d.busy;  // keeps the fd open while the system call runs outside the lock
    }
    const std::int64_t r = posix::perform(op, d.fd);
    bool queued = false;
    bool pushed;
    {
      std::lock_guard guard(d.lock);
      --d.busy;
      ring = &ring_of(d);
      if (r == -EAGAIN && !d.closed && !cancelling() &&
          !op.cancel_requested.load(std::memory_order_relaxed)) {
        queue_start(*ring, d, op, side);
        queued = pushed = true;
      } else {
        pushed = queue_close_if_due(*ring, d);  // a close that waited for this send
      }
    }
    if (pushed) ring->notify();
    if (queued) return false;
    op.result = r == -EAGAIN ? -ECANCELED : r;
    return true;
  }
  {
    std::lock_guard guard(d.lock);
    if (!admit_start(d, op)) return true;
    ring = &ring_of(d);
    queue_start(*ring, d, op, side);
  }
  ring->notify();
  return false;
}

void UringEngine::cancel(Operation& op) noexcept {
  auto& d = descriptor_of<UringDescriptor>(op);
  Ring* ring = nullptr;
  const int side = Descriptor::side(op.kind);
  {
    std::lock_guard guard(d.lock);
    op.cancel_requested.store(true, std::memory_order_relaxed);
    // Not pending (finished, never started, or named a socket since closed): nothing to do.
    // A start still in the queue sees cancel_requested when the poller reaches it.
    // Closed: the close request already cancels it (and no cancel request may follow a
    // close in the queue, or it could outlive the recycled descriptor).
    if (d.closed || d.generation != op.generation || d.slot[side] != &op || d.cancel_queued[side])
      return;
    d.cancel_queued[side] = true;
    ring = &ring_of(d);
    ring->push(d.cancel_request[side]);
  }
  ring->kick();  // cancellation is rare and should be prompt: no deferral
}

void UringEngine::close(DescriptorRef socket) noexcept {
  auto* d = &descriptor_cast<UringDescriptor>(*socket.descriptor);
  Ring* ring = nullptr;
  bool here = false;    // nothing names the fd: this thread closes it
  Ring* own = nullptr;  // this thread drives the socket's ring: it closes it through the kernel
  {
    std::lock_guard guard(d->lock);
    if (d->closed || d->generation != socket.generation) return;
    d->closed = true;
    ring = &ring_of(*d);
    if (d->placed) ring->sockets.fetch_sub(1, std::memory_order_relaxed);
    if (unreferenced(*d)) {
      here = true;
    } else {
      d->close_queued = true;
      ring->push(d->close_request);
      if (d->busy == 0 && drives(*ring))
        own = ring;
      else
        posix::shut_down_for_close(d->fd, d->busy != 0);  // the poller closes the fd later
    }
  }
  if (here) {
    close_now(nullptr, *d);
  } else if (own != nullptr) {
    // Our close is queued after every earlier request for the socket: drain() hands them to
    // the kernel in order, and close_now() cancels what the kernel holds, runs the completion
    // work that frees it and closes the fd, before we return. What drain() prepared after
    // the close is submitted here too: a busy owner looks again only when pending() says so,
    // and with the queue empty it no longer would.
    drain(*own);
    if (io_uring_sq_ready(&own->ring) > 0) {
      submits_.fetch_add(1, std::memory_order_relaxed);
      io_uring_submit(&own->ring);
    }
  } else {
    ring->kick();
  }
}

bool UringEngine::unreferenced(const UringDescriptor& d) noexcept {
  // No SQE names the fd now or later: a prepared or queued start occupies a slot, an armed (or
  // stopping) multishot operation is armed, an arm to come is queued, a socket being moved has
  // an operation on its way out of a ring. Nor does a queued request point at the descriptor,
  // which close_now() may give to the next socket.
  return d.busy == 0 && d.slots_empty() && !d.multishot_armed && !d.arm_queued && !d.moving &&
         !d.cancel_queued[0] && !d.cancel_queued[1] && !d.close_queued;
}

bool UringEngine::drives(const Ring& ring) const noexcept {
  // Rings mode: this_thread_ring is the ring this worker opened and has not retired, and only
  // it submits to and reaps that ring. Not with inline completions: drain() would run
  // handlers inside the close.
  return this_thread_ring == &ring && !options().inline_completions;
}

bool UringEngine::sends_through_ring(const Ring& ring) const noexcept {
  // Only the ring's owner queues: for anyone else a queued send costs the owner a wake-up, no
  // cheaper than the call. Not while the ring is lent: its owner blocks in a region and submits
  // nothing until it ends (relaxed: only the owner moves its ring between open and lent).
  if (!drives(ring) || ring.state.load(std::memory_order_relaxed) != Ring::State::open)
    return false;
  // And only when the send has company: requests already queued for the next enter, or items
  // queued on this worker, which may add more (the other replies of a batch). A lone reply on
  // a worker about to wait goes out with send(2): queued, it would cost the same two entries
  // (the enter that submits it returns with its CQE, then the wait) and a resumption on top.
  // The measurements behind the rule: docs/benchmarks.md ("Replies through the owner's ring, landed").
  return ring.incoming.load(std::memory_order_relaxed) != nullptr ||
         sched::Scheduler::work_queued_here();
}

void UringEngine::cancel_parked() noexcept {
  pool_.for_each([this](UringDescriptor& d) {
    std::lock_guard guard(d.lock);
    if (d.closed) return;  // its close request cancels its operations
    for (int side = 0; side < 2; ++side) {
      Operation* op = d.slot[side];
      if (op == nullptr) continue;
      op->cancel_requested.store(true, std::memory_order_relaxed);
      if (d.cancel_queued[side]) continue;  // the queued request will see the flag
      d.cancel_queued[side] = true;
      ring_of(d).push(d.cancel_request[side]);
    }
  });
  for (auto& r : rings_) {
    // Rings mode: a busy owner sees its queue when it looks; a sleeping one is woken.
    if (options().io_mode == IoMode::rings)
      r->kick();
    else
      r->wake_now();
  }
}

std::size_t UringEngine::reap_cqes(Ring& r, std::span<sched::Event> out) noexcept {
  io_uring_cqe* cqes[512];
  const unsigned max = static_cast<unsigned>(std::min<std::size_t>(out.size(), std::size(cqes)));
  const unsigned n = io_uring_peek_batch_cqe(&r.ring, cqes, max);
  std::size_t count = 0;
  for (unsigned i = 0; i < n; ++i) {
    const std::uint64_t data = io_uring_cqe_get_data64(cqes[i]);
    if ((cqes[i]->flags & IORING_CQE_F_MORE) == 0) --r.in_flight;  // its last CQE
    if (data == kIgnore) continue;
    if (data == kWakeRead) {
      r.wake_read_posted = false;
      continue;
    }
    if ((data & 7) == kMultishotTag) {
      auto& d = *reinterpret_cast<UringDescriptor*>(static_cast<std::uintptr_t>(data & ~7ull));
      if (on_multishot(r, d, cqes[i]->res, cqes[i]->flags, out[count])) ++count;
      continue;
    }
    auto* op = reinterpret_cast<Operation*>(static_cast<std::uintptr_t>(data));
    UringOp& state = state_of<UringOp>(*op);  // ours until this CQE's completion runs
    state.in_ring.store(false, std::memory_order_relaxed);
    if (state.moving.load(std::memory_order_relaxed)) {
      state.moving.store(false, std::memory_order_relaxed);
      --r.moving;
      if (move_on(r, *op, cqes[i]->res)) continue;
    }
    out[count++] = {&complete, op, cqes[i]->res, reinterpret_cast<std::uintptr_t>(this)};
  }
  io_uring_cq_advance(&r.ring, n);
  r.buffers.publish();
  return count;
}

bool UringEngine::admit_start(UringDescriptor& d, Operation& op) const noexcept {
  if (!admit(d, op, cancelling())) return false;
  // Only now: an operation refused as busy may be the one pending, whose state (its queued
  // request, the msghdr the kernel reads) must not be reset under it.
  UringOp& state = emplace_state<UringOp>(op);
  state.start = {nullptr, RequestKind::start, &op};
  return true;
}

void UringEngine::queue_start(Ring& ring, UringDescriptor& d, Operation& op, int side) noexcept {
  d.slot[side] = &op;
  ring.push(state_of<UringOp>(op).start);
}

bool UringEngine::queue_close_if_due(Ring& ring, UringDescriptor& d) noexcept {
  if (!d.closed || d.busy != 0 || d.fd_closed || d.close_queued) return false;
  d.close_queued = true;
  ring.push(d.close_request);
  return true;
}

void UringEngine::drain(Ring& r) noexcept {
  r.take_each(std::memory_order_acquire, [&](Request& request) {
    switch (request.kind) {
      case RequestKind::start: {
        auto* op = static_cast<Operation*>(request.owner);
        auto& d = descriptor_of<UringDescriptor>(*op);
        bool refuse;
        Ring* moved;
        {
          std::lock_guard guard(d.lock);
          refuse = d.closed || op->cancel_requested.load(std::memory_order_relaxed) || cancelling();
          moved = refuse ? nullptr : forward(r, d, request);
        }
        if (moved != nullptr) {
          moved->kick();
        } else if (refuse) {
          finish_refused(*op);
        } else {
          prepare(r.get_sqe(), *op, static_cast<int>(d.fd));
        }
        break;
      }
      case RequestKind::cancel_read:
      case RequestKind::cancel_write: {
        const int side = request.kind == RequestKind::cancel_read ? 0 : 1;
        auto& d = *static_cast<UringDescriptor*>(request.owner);
        Operation* target = nullptr;
        bool claimed = false;
        Ring* moved;
        {
          // Cancel whatever is pending on that side now, if it asked to be cancelled: the
          // operation that asked may have finished since, and its successor (perhaps at the
          // same address) has its own cancel_requested, false unless it asked too. Everything
          // about the target is read here, under the lock: once it is unlocked, a pending
          // operation may complete and its memory become the next operation.
          std::lock_guard guard(d.lock);
          moved = forward(r, d, request);  // cancel_queued stays set: it is queued there
          if (moved == nullptr) {
            d.cancel_queued[side] = false;
            target = d.slot[side];
            if (target != nullptr && !target->cancel_requested.load(std::memory_order_relaxed))
              target = nullptr;
            if (target != nullptr && state_of<UringOp>(*target).parked) {  // no SQE: take it out
              d.slot[side] = nullptr;
              claimed = true;
            }
          }
        }
        if (moved != nullptr) {
          moved->kick();
        } else if (claimed) {
          deliver_claimed(*target, -ECANCELED);
        } else if (target != nullptr) {  // the pointer is only user data here, not read
          io_uring_sqe* sqe = r.get_sqe();
          io_uring_prep_cancel(sqe, target, 0);
          io_uring_sqe_set_data64(sqe, kIgnore);
        }
        break;
      }
      case RequestKind::arm: {
        auto& d = *static_cast<UringDescriptor*>(request.owner);
        Ring* moved;
        {
          std::lock_guard guard(d.lock);
          moved = forward(r, d, request);  // arm_queued stays set: it is queued there
          if (moved == nullptr) {
            d.arm_queued = false;
            if (!d.closed && !d.multishot_armed) arm(r, d);
          }
        }
        if (moved != nullptr) moved->kick();
        break;
      }
      case RequestKind::close: {
        // A closed socket is never moved (lend() skips it), so its close is always here; kept
        // general all the same.
        auto& d = *static_cast<UringDescriptor*>(request.owner);
        Ring* moved;
        {
          std::lock_guard guard(d.lock);
          moved = forward(r, d, request);
        }
        if (moved != nullptr) {
          moved->kick();
        } else {
          close_now(&r, d);
        }
        break;
      }
    }
  });
}

Ring* UringEngine::forward(Ring& r, UringDescriptor& d, Request& request) noexcept {
  Ring& to = ring_of(d);
  if (&to == &r) return nullptr;
  to.push(request);  // under d.lock: in order with the socket's requests made since it moved
  return &to;
}

void UringEngine::finish_refused(Operation& op) noexcept {
  const sched::Event event{&complete, &op, -ECANCELED, reinterpret_cast<std::uintptr_t>(this)};
  deliver({&event, 1});
}

void UringEngine::close_now(Ring* r, UringDescriptor& d) noexcept {
  Operation* pending[2] = {nullptr, nullptr};
  Handle fd = kInvalidHandle;
  bool release = false;
  Operation* claimed = nullptr;
  std::vector<Handle> orphans;  // accepted, never taken (close is not a hot path)
  {
    std::lock_guard guard(d.lock);
    d.close_queued = false;
    claimed = parked(d);
    if (claimed != nullptr) d.slot[0] = nullptr;
    if (r != nullptr) {
      pending[0] = d.slot[0];
      pending[1] = d.slot[1];
      if (d.multishot_armed && !d.throttled) stop_multishot(*r, d);
    }
    // Back to the ring that lent them: recycled if that is `r`, else given back (a retired
    // lender's stack is never published again, which is harmless).
    for (std::uint16_t id = d.chunk_head; id != ProvidedBuffers::kNone;) {
      const std::uint16_t next = chunk_buffers(d).next(id);
      return_chunk(r, d, id);
      id = next;
    }
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
  for (Operation* op : pending) {
    if (op == nullptr) continue;
    io_uring_sqe* sqe = r->get_sqe();
    io_uring_prep_cancel(sqe, op, 0);
    io_uring_sqe_set_data64(sqe, kIgnore);
  }
  if (fd == kInvalidHandle) return;  // a worker is mid-send; it re-queues the close
  // Every SQE naming fd reaches the kernel before close(2). An SQE already in the kernel holds
  // its own reference to the file, so the number may be reused at once (a retired ring: nothing
  // will submit an SQE naming it again). Getting events runs the completion work the cancels
  // queued (deferred task work waits for this thread): the cancelled requests drop their
  // references to the file here, so close(2) is the last one and the socket is gone when it
  // returns (the port free, connects refused), rather than at this ring's next wait.
  if (r != nullptr) {
    submits_.fetch_add(1, std::memory_order_relaxed);
    io_uring_submit_and_get_events(&r->ring);
  }
  close_handle(fd);
  if (release) pool_.release(&d);
  // Counted after the release: once counters() shows the socket gone, its descriptor (if it
  // was idle) is free for the next attach, which tests that reuse it rely on.
  descriptors_.fetch_sub(1, std::memory_order_relaxed);
}

void UringEngine::complete(const sched::Event& event, sched::Disposition) noexcept {
  auto* op = static_cast<Operation*>(event.target);
  auto* self = reinterpret_cast<UringEngine*>(static_cast<std::uintptr_t>(event.data));
  auto& d = descriptor_of<UringDescriptor>(*op);
  bool release;
  std::int64_t result = event.result;
  Handle orphan = kInvalidHandle;
  Ring* again = nullptr;
  {
    std::lock_guard guard(d.lock);
    const int side = Descriptor::side(op->kind);
    d.slot[side] = nullptr;
    // Closed while in the kernel: whatever the close's shutdown or cancel made of it (end of
    // stream, EINVAL, EPIPE), it was cancelled; a connection it accepted is closed, not handed
    // to the closed listener's reader.
    if (d.closed) {
      if (op->kind == OpKind::accept && result >= 0) orphan = static_cast<Handle>(result);
      result = -ECANCELED;
    } else if (result == -EAGAIN &&
               (op->kind == OpKind::send || op->kind == OpKind::send_vectored) &&
               !self->cancelling() && !op->cancel_requested.load(std::memory_order_relaxed)) {
      // A send on our non-blocking socket waits in the kernel for room through one poll; a
      // wake-up with still no room (a read shutdown's, say) ends it with -EAGAIN, which is no
      // result for a writer: it goes back to the ring and waits again, as epoll's retry does
      // (CloseTest.AGatherWritePendingWhenTheReadSideIsShutDownGoesOn).
      again = &self->ring_of(d);
      self->queue_start(*again, d, *op, side);
    }
    release = again == nullptr && d.closed && d.fd_closed && d.idle();
  }
  if (again != nullptr) {
    again->notify();
    return;
  }
  if (release) self->pool_.release(&d);
  if (orphan != kInvalidHandle) close_handle(orphan);
  SubmitBatch batch;
  // recvmsg already wrote a receive_from peer into op.address; a poll's mask means readable.
  if (op->kind == OpKind::readable && result > 0) result = 0;
  if (op->kind == OpKind::receive_from && result >= 0) {
    // The kernel wrote the sender's length into our msghdr; a Unix address needs it.
    if (op->address != nullptr)
      op->address->set_native_size(state_of<UringOp>(*op).message.msg_namelen);
    result = posix::truncated_datagram(*op, result);
  }
  if (op->kind == OpKind::accept && result >= 0 && op->address != nullptr)
    op->address->set_native_size(state_of<UringOp>(*op).address_size);
  op->complete(*op, result);
}

void UringEngine::backend_counters(EngineCounters& c) const noexcept {
  c.add("submits", "io_uring_enter calls that submitted SQEs.",
        submits_.load(std::memory_order_relaxed));
  c.add("multishot_arms", "io_uring multishot accepts and receives armed.",
        multishot_arms_.load(std::memory_order_relaxed));
  c.add("buffered_reads", "Reads and accepts served from what a multishot operation had ready.",
        buffered_reads_.load(std::memory_order_relaxed));
  std::uint64_t ring_sends = 0;
  for (const auto& r : rings_)
    ring_sends += r->ring_sends.load(std::memory_order_relaxed);
  c.add("ring_sends", "Sends queued in the owner's ring, submitted with its next look or wait.",
        ring_sends);
  c.add("ring_moves", "Sockets moved off a worker's ring as the worker entered a BlockingRegion.",
        ring_moves_.load(std::memory_order_relaxed));
}

namespace {

Result<std::unique_ptr<Engine>> create(sched::Scheduler& scheduler, const EngineOptions& options,
                                       bool announce) {
  auto engine = std::make_unique<UringEngine>(scheduler, options);
  if (auto ec = engine->init()) return ec;
  if (announce)
    log::info("engine: io_uring ({}), {}, batch {}, tree {}{}; {}", engine->mode(),
              describe_polling(options), options.max_batch, options.max_tree,
              options.inline_completions ? ", inline" : "", engine->operations());
  return std::unique_ptr<Engine>(std::move(engine));
}

// A ring of the default size with no special set-up, checked the way set_up() checks every ring
// (the default size, so a kernel that charges ring memory to a small memlock limit fails here
// as create() would). A kernel that passes this but rejects the preferred set-up flags still
// gets a ring: set_up() falls back through older set-ups.
std::error_code probe() noexcept {
  io_uring ring{};
  io_uring_params params{};
  params.flags = IORING_SETUP_CLAMP;
  const int e = io_uring_queue_init_params(EngineOptions{}.ring_entries, &ring, &params);
  if (e < 0) return {-e, std::system_category()};
  const std::error_code missing = check_ring(ring, params);
  io_uring_queue_exit(&ring);
  return missing;
}

}  // namespace
}  // namespace uring

// Rings: a ring per worker cost less CPU per message than the shared ring (workers mode) on
// every echo shape measured, at a rate level with or above it, and kept the busy worker's tail
// (docs/benchmarks.md, "Rings under a busy worker" and "Rings by default"). Workers mode stays
// for schedulers without per-worker parking and for comparison (ARBOR_IO_MODE=workers).
const EngineEntry kUringEngine{"uring", IoMode::rings, &uring::probe, &uring::create};

}  // namespace arbor::io
