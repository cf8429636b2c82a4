// UringEngine, multishot: one multishot accept per listener and one multishot receive per
// stream socket, fed by ProvidedBuffers.
//
// Where the kernel has it, a listener's accepts and a stream socket's receives run as one
// multishot operation each, armed when a reader first waits. Its CQEs name the
// descriptor rather than an operation; the poller hands each result straight to the waiting
// reader (copying received bytes out of the provided buffer into the reader's span) or keeps
// it in the descriptor, where the next read or accept takes it on the worker without any
// hand-off. A reader that finds nothing parks in its slot without a request to the poller while
// the multishot is armed. Buffering is bounded: a socket holding kMaxChunks buffers, or a
// listener holding kMaxAccepted handles, has its multishot cancelled until its reader catches
// up (TCP flow control and the listen backlog then hold the rest). An empty buffer ring
// (-ENOBUFS) makes that one read a single-shot receive into the reader's own buffer.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "arbor/internal/log.hpp"
#include "linux/uring/engine.hpp"
#include "posix/socket_calls.hpp"

namespace arbor::io::uring {

// The handle a multishot accept produced, as accept(2) would return it: the peer address is
// filled in if asked for. A peer gone before we asked counts as an aborted connection.
std::int64_t finish_accept(Operation& op, std::int64_t handle) noexcept {
  if (handle < 0 || op.address == nullptr) return handle;
  if (posix::peer_into(handle, *op.address) != 0) {
    close_handle(handle);
    return -ECONNABORTED;
  }
  return handle;
}

bool UringEngine::start_multishot_accept(UringDescriptor& d, Operation& op) noexcept {
  Handle ready = kInvalidHandle;
  bool pushed = false;
  Ring* ring = nullptr;
  {
    std::lock_guard guard(d.lock);
    if (!admit_start(d, op)) return true;
    ring = &ring_of(d);
    if (d.accepted_head < d.accepted.size()) {
      ready = d.accepted[d.accepted_head++];
      if (d.accepted_head == d.accepted.size()) {
        d.accepted.clear();  // keeps its capacity: no allocation in steady state
        d.accepted_head = 0;
      }
    } else if (!multishot_accept_.load(std::memory_order_relaxed)) {
      queue_start(*ring, d, op, 0);
      pushed = true;
    } else {
      park(d, op);
      pushed = request_arm(*ring, d, OpKind::accept);
    }
  }
  if (ready != kInvalidHandle) {
    buffered_reads_.fetch_add(1, std::memory_order_relaxed);
    op.result = finish_accept(op, ready);
    return true;
  }
  if (pushed) ring->notify();
  return false;
}

bool UringEngine::start_multishot_receive(UringDescriptor& d, Operation& op) noexcept {
  bool pushed = false;
  Ring* ring = nullptr;
  {
    std::lock_guard guard(d.lock);
    if (!admit_start(d, op)) return true;
    ring = &ring_of(d);
    if (op.kind == OpKind::readable && (d.chunk_head != ProvidedBuffers::kNone || d.has_end)) {
      op.result = 0;  // the next receive takes it
      return true;
    } else if (d.chunk_head != ProvidedBuffers::kNone) {
      op.result = static_cast<std::int64_t>(take_chunks(
          chunk_buffers(d), d, op, [&](std::uint16_t id) { return_chunk(nullptr, d, id); }));
      buffered_reads_.fetch_add(1, std::memory_order_relaxed);
      return true;
    } else if (d.has_end) {
      op.result = take_end(d);
      return true;
    } else if (!d.stream || !multishot_receive_.load(std::memory_order_relaxed)) {
      queue_start(*ring, d, op, 0);  // datagrams keep their boundaries: single-shot
      pushed = true;
    } else {
      park(d, op);
      pushed = request_arm(*ring, d, OpKind::receive);
    }
  }
  if (pushed) ring->notify();
  return false;
}

std::int64_t UringEngine::receive_now(Operation& op) noexcept {
  auto& d = descriptor_of<UringDescriptor>(op);
  {
    std::lock_guard guard(d.lock);
    if (!admit_start(d, op)) return op.result;
    if (d.chunk_head != ProvidedBuffers::kNone) {
      buffered_reads_.fetch_add(1, std::memory_order_relaxed);
      return static_cast<std::int64_t>(take_chunks(
          chunk_buffers(d), d, op, [&](std::uint16_t id) { return_chunk(nullptr, d, id); }));
    }
    if (d.has_end) return take_end(d);
    // An armed multishot owns the socket's bytes: a receive of our own could take bytes
    // before ones it already holds in a CQE not yet reaped, out of order.
    if (d.multishot_armed || d.arm_queued) return -EAGAIN;
    ++d.busy;  // keeps the fd open while the system call runs outside the lock
  }
  const std::int64_t r = posix::perform(op, d.fd);
  bool pushed;
  Ring* ring = nullptr;
  {
    std::lock_guard guard(d.lock);
    --d.busy;
    ring = &ring_of(d);
    pushed = queue_close_if_due(*ring, d);  // a close that waited for this call
  }
  if (pushed) ring->notify();
  return r;
}

void UringEngine::park(UringDescriptor& d, Operation& op) noexcept {
  d.slot[0] = &op;
  state_of<UringOp>(op).parked = true;
}

Operation* UringEngine::parked(UringDescriptor& d) noexcept {
  Operation* op = d.slot[0];
  return op != nullptr && state_of<UringOp>(*op).parked ? op : nullptr;
}

bool UringEngine::request_arm(Ring& ring, UringDescriptor& d, OpKind kind) noexcept {
  if (d.multishot_armed || d.arm_queued) return false;
  d.arm_queued = true;
  d.arm_kind = kind;
  ring.push(d.arm_request);
  return true;
}

template <class Done>
std::size_t UringEngine::take_chunks(ProvidedBuffers& buffers, UringDescriptor& d, Operation& op,
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

std::int64_t UringEngine::take_end(UringDescriptor& d) noexcept {
  const std::int64_t r = d.end_result;
  if (r < 0) d.has_end = false;
  return r;
}

void UringEngine::arm(Ring& r, UringDescriptor& d) noexcept {
  multishot_arms_.fetch_add(1, std::memory_order_relaxed);
  d.multishot_armed = true;
  d.throttled = false;
  const int fd = static_cast<int>(d.fd);
  io_uring_sqe* sqe = r.get_sqe();
  if (d.arm_kind == OpKind::accept) {
    io_uring_prep_multishot_accept(sqe, fd, nullptr, nullptr, posix::kAcceptFlags);
  } else {
    io_uring_prep_recv_multishot(sqe, fd, nullptr, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = ProvidedBuffers::kGroup;
  }
  io_uring_sqe_set_data64(sqe, multishot_data(d));
}

void UringEngine::stop_multishot(Ring& r, UringDescriptor& d) noexcept {
  d.throttled = true;
  io_uring_sqe* sqe = r.get_sqe();
  io_uring_prep_cancel64(sqe, multishot_data(d), 0);
  io_uring_sqe_set_data64(sqe, kIgnore);
}

void UringEngine::unsupported(std::atomic<bool>& flag, const char* what) noexcept {
  if (flag.exchange(false, std::memory_order_relaxed))
    log::warn("io_uring: multishot {} is not supported here; using single-shot", what);
}

bool UringEngine::on_multishot(Ring& r, UringDescriptor& d, int res, unsigned flags,
                               sched::Event& event) noexcept {
  Operation* claimed = nullptr;
  std::int64_t result = 0;
  Handle orphan = kInvalidHandle;
  bool release = false;
  bool accepting;
  Ring* moved = nullptr;  // the socket's new ring, if a request was pushed to it
  {
    std::lock_guard guard(d.lock);
    accepting = d.arm_kind == OpKind::accept;
    const bool more = (flags & IORING_CQE_F_MORE) != 0;
    if (!more) d.multishot_armed = false;
    if (!more && d.moving) {  // the last CQE of an operation lend() stopped
      d.moving = false;
      --r.moving;
    }
    Operation* op = parked(d);
    bool single_shot = false;  // the reader falls back to a single-shot operation
    if (accepting) {
      if (res >= 0 && d.closed) {
        orphan = res;
      } else if (d.closed) {
        // The end of an accept the close stopped: -ECANCELED, or -EINVAL once its shutdown
        // took the socket out of listening (not a kernel without multishot accept).
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
        r.buffers.taken();
        if (res > 0 && !d.closed)
          append_chunk(r, d, id, static_cast<std::uint32_t>(res));
        else
          r.buffers.recycle(id);
      } else if (d.closed) {
        // The end of a receive the close stopped (its shutdown's end of stream, -ECANCELED):
        // nothing for a reader, who is cancelled below or by close_now().
      } else if (res == 0) {
        d.has_end = true;
        d.end_result = 0;
      } else if (res == -EINVAL) {
        unsupported(multishot_receive_, "receive");
        single_shot = true;
      } else if (res == -ENOBUFS) {
        single_shot = true;   // the ring is empty until readers give buffers back
        r.buffers.starved();  // or until the next publish() adds more
      } else if (res < 0 && res != -ECANCELED) {
        d.has_end = true;
        d.end_result = res;
      }
      if (d.closed) {
        // A closed socket's reader gets nothing more (see below).
      } else if (op != nullptr && op->kind == OpKind::readable &&
                 (d.chunk_head != ProvidedBuffers::kNone || d.has_end)) {
        claimed = op;  // what arrived stays here for the receive that follows
        result = 0;
      } else if (op != nullptr && d.chunk_head != ProvidedBuffers::kNone) {
        claimed = op;
        result = static_cast<std::int64_t>(take_chunks(
            chunk_buffers(d), d, *op, [&](std::uint16_t id) { return_chunk(&r, d, id); }));
      } else if (op != nullptr && d.has_end) {
        claimed = op;
        result = take_end(d);
      }
      if (more && !d.throttled && d.chunk_count >= kMaxChunks) stop_multishot(r, d);
    }
    // A retired ring (rings mode, its owner closing it) starts nothing new, nor does a closed
    // socket: the reader the multishot operation leaves behind completes as cancelled (while it
    // still runs, close_now() takes the reader).
    if (claimed == nullptr && op != nullptr && !d.multishot_armed &&
        (d.closed || r.state.load(std::memory_order_relaxed) == Ring::State::retired)) {
      claimed = op;
      result = -ECANCELED;
    }
    if (claimed != nullptr) {
      d.slot[0] = nullptr;
    } else if (op != nullptr && !d.multishot_armed && !d.closed) {
      Ring& to = ring_of(d);  // the socket's ring now: another, if lend() moved it
      if (single_shot) {
        state_of<UringOp>(*op).parked = false;  // completes through complete(), freeing the slot
        if (&to == &r) {
          prepare(r.get_sqe(), *op, static_cast<int>(d.fd));
        } else {
          queue_start(to, d, *op, 0);
          moved = &to;
        }
      } else if (&to == &r) {
        arm(r, d);
      } else if (request_arm(to, d, d.arm_kind)) {
        moved = &to;
      }
    }
    release = !more && d.closed && d.fd_closed && d.idle();
  }
  close_handle(orphan);
  if (moved != nullptr) moved->kick();  // not notify(): a SubmitBatch may outlast a region
  if (release) pool_.release(&d);
  if (claimed == nullptr) return false;
  event = {accepting ? &complete_accepted : &complete_claimed, claimed, result,
           reinterpret_cast<std::uintptr_t>(this)};
  return true;
}

void UringEngine::store_accepted(Ring& r, UringDescriptor& d, Handle handle, bool more,
                                 Handle& orphan) noexcept {
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

void UringEngine::append_chunk(Ring& r, UringDescriptor& d, std::uint16_t id,
                               std::uint32_t length) noexcept {
  // Armed only with an empty list, so a list never holds two rings' buffers (see chunk_ring).
  if (d.chunk_head == ProvidedBuffers::kNone) d.chunk_ring = r.index;
  ProvidedBuffers& buffers = r.buffers;
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

void UringEngine::return_chunk(Ring* current, UringDescriptor& d, std::uint16_t id) noexcept {
  Ring& lender = *rings_[static_cast<std::size_t>(d.chunk_ring)];
  if (&lender == current)
    lender.buffers.recycle(id);
  else
    lender.buffers.give_back(id);
}

void UringEngine::deliver_claimed(Operation& op, std::int64_t result) noexcept {
  const sched::Event event{&complete_claimed, &op, result, reinterpret_cast<std::uintptr_t>(this)};
  deliver({&event, 1});
}

void UringEngine::complete_claimed(const sched::Event& event, sched::Disposition) noexcept {
  auto* op = static_cast<Operation*>(event.target);
  SubmitBatch batch;
  op->complete(*op, event.result);
}

void UringEngine::complete_accepted(const sched::Event& event, sched::Disposition) noexcept {
  auto* op = static_cast<Operation*>(event.target);
  const std::int64_t result = finish_accept(*op, event.result);
  SubmitBatch batch;
  op->complete(*op, result);
}

}  // namespace arbor::io::uring
