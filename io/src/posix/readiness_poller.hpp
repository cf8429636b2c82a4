// ReadinessPoller: the few kernel calls a readiness engine makes, behind one small interface, so
// the readiness protocol (posix/readiness_engine.cpp) is written once and each OS's poller
// (epoll on Linux, kqueue on the BSDs and macOS) is a thin adapter of it.
//
// Invariants an adapter keeps:
// - A descriptor is watched once, for both directions, edge-triggered, from add() to remove():
//   the protocol never changes interest, so there is no modify. Edge-triggered means each new
//   readiness is reported once, and a socket with a persistent error or hang-up yields one
//   report, not a busy loop.
// - wait() reports only descriptors added before the report (the token add() was given); its
//   own wakes it consumes and never reports.
// - remove() runs before the descriptor's fd is closed: an emulation that cannot see closes
//   (libkqueue) would otherwise keep the old watch and give it to the fd number's next socket.
// - One thread at a time calls wait() (the poller, or the worker holding the poll right); add(),
//   remove() and wake() come from any thread, concurrently with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "arbor/io/operation.hpp"
#include "arbor/result.hpp"

namespace arbor::io {

/// What one report says about one descriptor. `error` (an error or a hang-up) retries both
/// sides; a read side's end of stream is `readable` (the read returns 0). `taken_error`: a
/// socket error (errno value) the poller read from the socket, and so cleared, to build the
/// report: the next call on the socket no longer sees it, so the engine reports it in that
/// call's stead. 0 where the poller leaves the socket's error alone (epoll, native kqueue).
struct Readiness {
  void* token = nullptr;
  bool readable = false;
  bool writable = false;
  bool error = false;
  int taken_error = 0;
  // The read side stays readable whatever receives take from it: the peer's end, an error, or
  // urgent data (a TCP receive stops short at its mark). The engine then never counts the socket
  // empty after a short receive (readiness_engine.cpp, note_drained()).
  bool stays_readable = false;
};

class ReadinessPoller {
 public:
  virtual ~ReadinessPoller() = default;
  /// Watches `fd` in both directions, edge-triggered, reporting `token`. 0 or an errno value.
  virtual int add(Handle fd, void* token) noexcept = 0;
  /// Stops watching `fd`, before its owner closes it. Errors are ignored (the fd closes anyway).
  virtual void remove(Handle fd) noexcept = 0;
  /// Waits until a report, a wake() or timeout_ns passes (-1 = forever, 0 = only look); fills
  /// `out` (never more than its size, at most the capacity the poller was made with) and
  /// returns the number of reports.
  virtual std::size_t wait(std::int64_t timeout_ns, std::span<Readiness> out) noexcept = 0;
  /// Makes the current or next wait() return soon. Any thread.
  virtual void wake() noexcept = 0;
};

/// An adapter's factory: a poller able to return `capacity` reports per wait, or the system
/// error that prevented it. The engine owns what it returns.
using MakeReadinessPoller = Result<std::unique_ptr<ReadinessPoller>> (*)(std::size_t capacity);

}  // namespace arbor::io
