// AttachedSocket: a socket attached to an engine and owned by one object.
//
// The common core of TcpStream, TcpListener and UdpSocket: move-only ownership, close on
// destruction, and the socket's name {descriptor, generation}.
// Ownership: this object owns the socket, and its operations name it by {pointer, generation},
// so one built before a close() (from any task) completes with operation_canceled, even once the
// engine has given the descriptor to another socket. The pointer is atomic so that close() may
// race an operation being built: one built after the close fails with bad_file_descriptor.
#pragma once

#include <atomic>
#include <cstdint>

#include "arbor/address.hpp"
#include "arbor/io/engine.hpp"
#include "arbor/result.hpp"

namespace arbor::detail {

class AttachedSocket {
 public:
  AttachedSocket() = default;
  AttachedSocket(io::Engine& engine, io::DescriptorRef socket) noexcept
      : engine_(&engine), descriptor_(socket.descriptor), generation_(socket.generation) {}
  AttachedSocket(AttachedSocket&& other) noexcept
      : engine_(other.engine_),
        descriptor_(other.descriptor_.exchange(nullptr)),
        generation_(other.generation_) {}
  AttachedSocket& operator=(AttachedSocket&& other) noexcept;
  ~AttachedSocket() { close(); }

  io::Engine* engine() const noexcept { return engine_; }
  /// nullptr once closed (or never opened).
  io::Descriptor* descriptor() const noexcept {
    return descriptor_.load(std::memory_order_acquire);
  }
  /// The name operations carry: {nullptr, ...} once closed.
  io::DescriptorRef ref() const noexcept { return {descriptor(), generation_}; }
  /// Closes now (io::Engine::close() says what the kernel has done by its return); pending
  /// operations complete with operation_canceled. Idempotent. Afterwards this object owns no
  /// descriptor (the engine closes the handle).
  void close() noexcept;

  /// The OS handle, or bad_file_descriptor when closed.
  Result<io::Handle> handle() const noexcept;
  Result<Address> local_address() const noexcept;

 private:
  io::Engine* engine_ = nullptr;
  std::atomic<io::Descriptor*> descriptor_{nullptr};
  std::uint32_t generation_ = 0;  // written only on construction and move assignment
};

}  // namespace arbor::detail
