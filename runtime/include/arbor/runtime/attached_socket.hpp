// AttachedSocket: a socket attached to an engine and owned by one object.
//
// The common core of TcpStream, TcpListener and UdpSocket: move-only ownership, close on
// destruction, and the descriptor pointer. That pointer is atomic so that close() from one
// task may race an operation another task starts: the pending operation is cancelled, and
// one started after the close sees no descriptor and fails with bad_file_descriptor.
#pragma once

#include <atomic>

#include "arbor/io/address.hpp"
#include "arbor/io/engine.hpp"
#include "arbor/io/result.hpp"

namespace arbor::detail {

class AttachedSocket {
 public:
  AttachedSocket() = default;
  AttachedSocket(io::Engine& engine, io::Descriptor* descriptor) noexcept
      : engine_(&engine), descriptor_(descriptor) {}
  AttachedSocket(AttachedSocket&& other) noexcept
      : engine_(other.engine_), descriptor_(other.descriptor_.exchange(nullptr)) {}
  AttachedSocket& operator=(AttachedSocket&& other) noexcept;
  ~AttachedSocket() { close(); }

  io::Engine* engine() const noexcept { return engine_; }
  /// nullptr once closed (or never opened).
  io::Descriptor* descriptor() const noexcept {
    return descriptor_.load(std::memory_order_acquire);
  }
  /// Closes now; pending operations complete with operation_canceled. Idempotent.
  void close() noexcept;

  /// The OS handle, or bad_file_descriptor when closed.
  Result<io::Handle> handle() const noexcept;
  Result<Address> local_address() const noexcept;

 private:
  io::Engine* engine_ = nullptr;
  std::atomic<io::Descriptor*> descriptor_{nullptr};
};

}  // namespace arbor::detail
