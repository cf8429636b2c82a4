// Operation: one asynchronous socket operation, as the engines see it.
//
// The caller owns the memory (typically a coroutine frame's awaiter) and keeps it alive until
// the operation completes; the engine never allocates per operation. The result is what the
// kernel reports: >= 0 on success (bytes moved, or the accepted handle) and -errno on failure
// (-ECANCELED when cancelled or when its socket was closed).
//
// Ownership: an Operation names its descriptor by {pointer, generation}; a stale one (its
// socket closed, perhaps the descriptor since recycled for another socket) completes with
// operation_canceled.
//
// Completion contract: Engine::start() either finishes the operation during the call and
// returns true (result in `result`, `complete` NOT called), or returns false and later calls
// `complete(op, result)` exactly once, from a scheduler worker (or the poller in inline mode).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "arbor/address.hpp"

namespace arbor::io {

/// A socket: a file descriptor on POSIX, a SOCKET on Windows.
using Handle = std::intptr_t;
inline constexpr Handle kInvalidHandle = -1;

/// Buffer views with the layout of `struct iovec` (checked where it matters), so a scatter or
/// gather list goes to the kernel without a copy. IOCP converts to WSABUF in its backend.
struct MutableBuffer {
  void* data = nullptr;
  std::size_t size = 0;
};
struct ConstBuffer {
  const void* data = nullptr;
  std::size_t size = 0;
};

enum class OpKind : std::uint8_t {
  receive,        // buffer -> bytes read (0 = end of stream)
  send,           // buffer -> bytes written
  send_vectored,  // buffers/count -> bytes written
  accept,         // address (out, may be null) -> new handle, non-blocking
  connect,        // address (in) -> 0
  receive_from,   // buffer, address (out) -> bytes read
  send_to,        // buffer, address (in) -> bytes written
  readable,       // nothing -> 0 once a receive would not wait (data, end of stream or an
                  // error is there); consumes nothing, so a waiting socket holds no buffer
};

/// Whether an operation waits for the socket to become readable (true) or writable.
constexpr bool is_read_side(OpKind kind) noexcept {
  return kind == OpKind::receive || kind == OpKind::accept || kind == OpKind::receive_from ||
         kind == OpKind::readable;
}

/// Engine-owned state of one attached socket; opaque outside the engines.
struct Descriptor;

/// An attached socket's name, as Engine::attach() hands it out. Descriptors are recycled (never
/// freed while their engine lives), so the pointer alone may come to mean another socket; the
/// generation, bumped each time the descriptor is given to a new socket, tells them apart.
struct DescriptorRef {
  Descriptor* descriptor = nullptr;
  std::uint32_t generation = 0;
  friend bool operator==(const DescriptorRef&, const DescriptorRef&) = default;
};

/// Bytes every Operation reserves for its engine's private per-operation state. Each backend
/// checks with static_assert that its state fits (backend_state() below). Sized per platform
/// for the largest backend there: io_uring's msghdr + iovec + hand-off link on Linux; IOCP's
/// OVERLAPPED + AcceptEx's two (sockaddr_storage + 16)-byte address slots + WSABUF on Windows.
#if defined(_WIN32)
inline constexpr std::size_t kOperationStateSize = 384;
#else
inline constexpr std::size_t kOperationStateSize = 128;
#endif

struct Operation {
  using Complete = void (*)(Operation& op, std::int64_t result) noexcept;

  Complete complete = nullptr;
  void* context = nullptr;  // the caller's (e.g. the awaiter holding this); engines ignore it
  Descriptor* descriptor = nullptr;
  OpKind kind = OpKind::receive;
  std::uint32_t generation = 0;  // the descriptor's generation this operation was built for

  /// Aims the operation at `socket` (both halves of its name).
  void target(DescriptorRef socket) noexcept {
    descriptor = socket.descriptor;
    generation = socket.generation;
  }

  // Arguments (which ones are used depends on `kind`).
  void* data = nullptr;        // receive/send buffer, or const ConstBuffer* for vectored
  std::size_t size = 0;        // bytes, or buffer count for vectored
  Address* address = nullptr;  // accept/receive_from: out; connect/send_to: in

  std::int64_t result = 0;  // set when start() completes inline

  /// Set (under the descriptor's lock) by Engine::cancel(); an engine that finds it set
  /// finishes the operation with -ECANCELED instead of letting it wait.
  std::atomic<bool> cancel_requested{false};

  /// The engine's private state for this operation, constructed by its start() (callers
  /// never touch it; it needs no destruction).
  alignas(std::max_align_t) unsigned char engine_state[kOperationStateSize];
};

}  // namespace arbor::io
