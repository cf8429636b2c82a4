// Descriptor: the engines' state for one attached socket, and the pool that recycles it.
//
// Invariants (all fields guarded by `lock`):
// - slot[side] holds the one pending operation of that side (0 = read, 1 = write), if any.
// - busy counts threads currently running a system call on `fd` outside the lock. The fd is
//   closed only when `closed` is set and busy drops to zero, so a close racing an operation can
//   never make that operation touch a reused descriptor number.
// - The Descriptor itself returns to the pool only when, in addition, it is idle(): no slot is
//   occupied and no io_uring multishot operation still names it.
//
// - generation counts the sockets this descriptor has served: reset() bumps it when the
//   descriptor is given to a new socket. start(), cancel() and close() compare it, under the
//   lock, with the generation the caller's name carries ({pointer, generation}, see
//   operation.hpp). On a mismatch the name is stale: start() finishes with -ECANCELED,
//   cancel() and close() leave the descriptor alone.
//
// Descriptors are never freed while their engine lives, only recycled, so following a stale
// pointer to compare generations is always safe. A readiness event that a poller harvested just
// before a close may likewise reach a recycled descriptor: it bumps a readiness generation and
// at worst makes a pending operation retry once and find EAGAIN.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "arbor/io/operation.hpp"
#include "arbor/io/socket.hpp"

namespace arbor::io {

struct Descriptor {
  std::mutex lock;
  Handle fd = kInvalidHandle;
  int poller = 0;
  std::uint32_t generation = 0;  // a stale name would have to outlive 2^32 reuses to match
  bool closed = false;
  bool fd_closed = false;
  int busy = 0;
  Operation* slot[2] = {nullptr, nullptr};
  std::uint32_t seq[2] = {0, 0};  // readiness generations (readiness engines)
  Descriptor* next_free = nullptr;
  // io_uring: close and cancel requests handed to the poller. They live here, not in the
  // Operation, because an operation may complete (and its memory be reused for the next one)
  // while a cancel request for it is still queued; the descriptor outlives both.
  Operation::Link close_link;
  Operation::Link cancel_link[2];
  bool close_queued = false;
  bool cancel_queued[2] = {false, false};
  // io_uring multishot, read side: at most one multishot accept or receive runs per socket,
  // armed when a reader first waits and kept until it ends (error, EOF, throttle, close).
  // What it produces and no reader has taken yet waits here: accepted handles in `accepted`
  // (from accepted_head on), received bytes as a list of provided buffers (chunk_head ..
  // chunk_tail, linked through ProvidedBuffers::next), and a final result (EOF or an error).
  Operation::Link arm_link;
  OpKind arm_kind = OpKind::receive;
  bool stream = false;  // a stream socket: receives may use the multishot path
  bool arm_queued = false;
  bool multishot_armed = false;
  bool throttled = false;  // a cancel was sent to stop it buffering more
  bool has_end = false;
  std::int64_t end_result = 0;
  std::uint16_t chunk_head = 0xffff;
  std::uint16_t chunk_tail = 0xffff;
  std::uint32_t chunk_count = 0;
  std::vector<Handle> accepted;
  std::size_t accepted_head = 0;

  static constexpr int side(OpKind kind) noexcept { return is_read_side(kind) ? 0 : 1; }

  void reset(Handle handle, int owner) noexcept {
    ++generation;  // names handed out for earlier sockets go stale
    fd = handle;
    poller = owner;
    closed = fd_closed = close_queued = false;
    cancel_queued[0] = cancel_queued[1] = false;
    busy = 0;
    slot[0] = slot[1] = nullptr;
    stream = arm_queued = multishot_armed = throttled = has_end = false;
    chunk_head = chunk_tail = 0xffff;
    chunk_count = 0;
    accepted.clear();
    accepted_head = 0;
  }

  /// Under `lock`, at engine teardown: closes the fd if its owner never closed the socket.
  /// Returns whether it did.
  bool close_if_open() noexcept {
    if (fd_closed || fd == kInvalidHandle) return false;
    fd_closed = true;
    close_handle(fd);
    return true;
  }

  bool idle() const noexcept {
    return slot[0] == nullptr && slot[1] == nullptr && !multishot_armed;
  }

  /// Under `lock`: what the caller must do once it unlocks (see the invariants above).
  struct Finish {
    Handle close_fd = kInvalidHandle;
    bool release = false;
  };
  Finish finish_if_closed() noexcept {
    Finish f;
    if (!closed || busy != 0) return f;
    if (!fd_closed) {
      fd_closed = true;
      f.close_fd = fd;
    }
    f.release = idle();
    return f;
  }
};

/// The operation whose start_link `link` is (engines chain operations through it).
inline Operation* operation_of(Operation::Link* link) noexcept {
  return reinterpret_cast<Operation*>(reinterpret_cast<char*>(link) -
                                      offsetof(Operation, start_link));
}

/// Runs op's system call once without blocking: >= 0 or -errno (-EAGAIN: would block).
std::int64_t perform(Operation& op, Handle fd) noexcept;

/// Makes `fd` non-blocking; 0 or -errno.
int make_non_blocking(Handle fd) noexcept;

/// Grows to the largest number of sockets attached at once, then recycles.
class DescriptorPool {
 public:
  /// The first half of every engine's attach(): makes `handle` non-blocking and gives it a
  /// descriptor owned by one of `owners` pollers (round-robin), under a new generation. Closes
  /// the handle on error.
  Result<DescriptorRef> adopt(Handle handle, std::size_t owners) noexcept {
    if (int e = make_non_blocking(handle); e != 0) {
      close_handle(handle);
      return errno_code(e);
    }
    Descriptor* d = nullptr;
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

  Descriptor* acquire() {
    std::lock_guard guard(mutex_);
    if (free_ != nullptr) {
      Descriptor* d = free_;
      free_ = d->next_free;
      return d;
    }
    all_.push_back(std::make_unique<Descriptor>());
    return all_.back().get();
  }
  /// Calls fn(descriptor) for every descriptor ever made (idle ones have empty slots).
  template <class Fn>
  void for_each(Fn&& fn) {
    std::lock_guard guard(mutex_);
    for (auto& d : all_)
      fn(*d);
  }
  void release(Descriptor* d) noexcept {
    std::lock_guard guard(mutex_);
    d->next_free = free_;
    free_ = d;
  }

 private:
  std::mutex mutex_;
  Descriptor* free_ = nullptr;
  std::vector<std::unique_ptr<Descriptor>> all_;
  std::atomic<std::uint64_t> next_owner_{0};
};

}  // namespace arbor::io
