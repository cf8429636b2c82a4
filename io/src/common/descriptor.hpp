// Descriptor: what every engine keeps for one attached socket, and the pool that recycles it.
//
// A backend derives its own descriptor from this one (ReadyDescriptor, UringDescriptor) and
// adds only what it needs; the pool is templated on that type, so an engine never holds a
// descriptor of another backend and its downcasts (descriptor_cast) are always right.
//
// Invariants (all fields guarded by `lock`):
// - slot[side] holds the one pending operation of that side (0 = read, 1 = write), if any.
// - busy counts threads currently running a system call on `fd` outside the lock. The fd is
//   closed only when `closed` is set and busy drops to zero, so a close racing an operation can
//   never make that operation touch a reused descriptor number.
// - The Descriptor itself returns to the pool only when, in addition, it is idle: no slot is
//   occupied and nothing the backend still has in the kernel names it (finish_if_closed's
//   `backend_idle`).
// - generation counts the sockets this descriptor has served: reset() bumps it when the
//   descriptor is given to a new socket. start(), cancel() and close() compare it, under the
//   lock, with the generation the caller's name carries ({pointer, generation}, see
//   operation.hpp). On a mismatch the name is stale: start() finishes with -ECANCELED,
//   cancel() and close() leave the descriptor alone.
// - Close means closed: when an engine's close() returns, the kernel no longer serves the
//   socket. Where the fd itself cannot be closed yet (a thread is in a system call on it, or
//   an io_uring request still holds the file), close() shuts it down, under `lock` while the
//   number is still ours (posix::shut_down_for_close() on Linux): a
//   listener stops listening (connects are refused, the port can be bound again with
//   SO_REUSEADDR, what waited in its backlog is reset), pending reads end, and, unless a call
//   is in flight (it may be a send, which must not be cut short) or the socket is to close
//   with a reset (SO_LINGER 0), a stream's peer sees the end; otherwise it sees it when the fd
//   is closed, as soon as that call lets go or by the ring's poller. What the shutdown
//   makes of the operations still on the socket, and anything they produce (an accepted
//   connection), counts as cancelled.
//
// Descriptors are never freed while their engine lives, only recycled, so following a stale
// pointer to compare generations is always safe. An event a poller harvested just before a
// close may likewise reach a recycled descriptor; each backend says in its file why that is
// harmless there.
#pragma once

#include <atomic>
#include <cerrno>
#include <concepts>
#include <memory>
#include <mutex>
#include <new>
#include <type_traits>
#include <vector>

#include "arbor/io/operation.hpp"
#include "arbor/io/socket.hpp"

namespace arbor::io {

struct Descriptor {
  std::mutex lock;
  Handle fd = kInvalidHandle;
  // The poller (ring) that serves it. Set by reset(); changed later only by io_uring's rings
  // mode, under `lock`, when a worker entering a BlockingRegion moves its sockets to other
  // rings. So a request is pushed to the ring read under the lock; reads outside it must not
  // care which ring they get (every ring has the same set-up).
  std::atomic<int> poller{0};
  std::uint32_t generation = 0;  // a stale name would have to outlive 2^32 reuses to match
  bool closed = false;
  bool fd_closed = false;
  int busy = 0;
  Operation* slot[2] = {nullptr, nullptr};
  Descriptor* next_free = nullptr;

  static constexpr int side(OpKind kind) noexcept { return is_read_side(kind) ? 0 : 1; }

  /// Under `lock`: gives the descriptor to a new socket. Backends extend it with their own
  /// reset(), which calls this one first.
  void reset(Handle handle, int owner) noexcept {
    ++generation;  // names handed out for earlier sockets go stale
    fd = handle;
    poller.store(owner, std::memory_order_relaxed);
    closed = fd_closed = false;
    busy = 0;
    slot[0] = slot[1] = nullptr;
  }

  /// Under `lock`, at engine teardown: closes the fd if its owner never closed the socket.
  /// Returns whether it did.
  bool close_if_open() noexcept {
    if (fd_closed || fd == kInvalidHandle) return false;
    fd_closed = true;
    close_handle(fd);
    return true;
  }

  bool slots_empty() const noexcept { return slot[0] == nullptr && slot[1] == nullptr; }

  /// Under `lock`: whether a name carrying `name_generation` may still act on this socket.
  bool admits(std::uint32_t name_generation) const noexcept {
    return !closed && generation == name_generation;
  }

  /// What the caller must do once it unlocks (see the invariants above).
  struct Finish {
    Handle close_fd = kInvalidHandle;
    bool release = false;
  };
  /// Under `lock`. `backend_idle`: the backend has nothing in flight that names this descriptor.
  Finish finish_if_closed(bool backend_idle = true) noexcept {
    Finish f;
    if (!closed || busy != 0) return f;
    if (!fd_closed) {
      fd_closed = true;
      f.close_fd = fd;
    }
    f.release = slots_empty() && backend_idle;
    return f;
  }
};

/// The backend's view of a descriptor its own pool made (see the file comment).
template <std::derived_from<Descriptor> D>
D& descriptor_cast(Descriptor& d) noexcept {
  return static_cast<D&>(d);
}
template <std::derived_from<Descriptor> D>
D& descriptor_of(const Operation& op) noexcept {
  return static_cast<D&>(*op.descriptor);
}

/// Under the descriptor's lock: the admission rule every engine applies before an operation
/// may wait (its socket open, its name current, not cancelled, the engine not cancelling
/// everything, its side free). If not admitted, op.result holds its inline result.
inline bool admit(const Descriptor& d, Operation& op, bool engine_cancelling) noexcept {
  if (!d.admits(op.generation) || op.cancel_requested.load(std::memory_order_relaxed) ||
      engine_cancelling) {
    op.result = -ECANCELED;
    return false;
  }
  if (d.slot[Descriptor::side(op.kind)] != nullptr) {
    op.result = -EBUSY;
    return false;
  }
  return true;
}

/// Grows to the largest number of sockets attached at once, then recycles. `D` is the
/// backend's descriptor type; it has `void reset(Handle, int)` extending Descriptor's.
/// Descriptors are made kSlab at a time, side by side: made one by one, each would sit in the
/// heap between the coroutine frames of the connections of its time, and, never freed, keep
/// their pages resident after those connections end (after a spike of 10,000 connections,
/// nearly all of the memory they used: perf/http/idle_connections).
template <std::derived_from<Descriptor> D>
class DescriptorPool {
 public:
  static constexpr std::size_t kSlab = 64;
  /// The common half of every engine's attach(): gives `handle` a descriptor owned by one of
  /// `owners` pollers (round-robin), under a new generation. Closes the handle on error.
  Result<DescriptorRef> adopt(Handle handle, std::size_t owners) noexcept {
    D* d = nullptr;
    try {
      d = acquire();
    } catch (const std::bad_alloc&) {
      close_handle(handle);
      return std::make_error_code(std::errc::not_enough_memory);
    }
    const auto owner = next_owner_.fetch_add(1, std::memory_order_relaxed) % owners;
    std::lock_guard guard(d->lock);
    d->reset(handle, static_cast<int>(owner));
    return DescriptorRef{d, d->generation};
  }

  /// Calls fn(descriptor) for every descriptor ever made (idle ones have empty slots).
  template <class Fn>
  void for_each(Fn&& fn) {
    std::lock_guard guard(mutex_);
    for (std::size_t i = 0; i < made_; ++i)
      fn(slabs_[i / kSlab][i % kSlab]);
  }
  void release(Descriptor* d) noexcept {
    std::lock_guard guard(mutex_);
    d->next_free = free_;
    free_ = d;
  }

 private:
  D* acquire() {
    std::lock_guard guard(mutex_);
    if (free_ != nullptr) {
      Descriptor* d = free_;
      free_ = d->next_free;
      return static_cast<D*>(d);
    }
    if (made_ % kSlab == 0) slabs_.push_back(std::make_unique<D[]>(kSlab));  // may throw: first
    D* d = &slabs_.back()[made_ % kSlab];
    ++made_;
    return d;
  }

  std::mutex mutex_;
  Descriptor* free_ = nullptr;
  std::vector<std::unique_ptr<D[]>> slabs_;
  std::size_t made_ = 0;  // descriptors handed out of the slabs so far
  std::atomic<std::uint64_t> next_owner_{0};
};

}  // namespace arbor::io
