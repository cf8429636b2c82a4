// DatagramSocket: datagrams for tasks, what UdpSocket and UnixDatagram share.
//
// One datagram per receive. One longer than the buffer fails with message_size (EMSGSIZE) on
// every engine, and is gone (the kernel discards it, as it does the tail of any truncated
// datagram): a reader that may meet long datagrams uses a buffer of the largest it accepts.
// At most one receive and one send may be pending at a time (a second gets
// device_or_resource_busy); close() completes them with operation_canceled.
// Ownership: the object owns its socket (BasicSocket); buffers and addresses passed to an
// operation are the caller's and must outlive its await.
#pragma once

#include <span>

#include "arbor/address.hpp"
#include "arbor/io/engine.hpp"
#include "arbor/result.hpp"
#include "arbor/runtime/basic_socket.hpp"
#include "arbor/runtime/io_awaiter.hpp"

namespace arbor {

class DatagramSocket : public BasicSocket {
 public:
  /// One datagram into `buffer`; `from` receives the sender. message_size if it was longer.
  detail::TransferAwaiter receive_from(std::span<std::byte> buffer, Address& from) noexcept {
    return detail::TransferAwaiter(socket_.engine(), socket_.ref(), io::OpKind::receive_from,
                                   buffer.data(), buffer.size(), &from);
  }
  /// Sends `buffer` as one datagram to `to`.
  detail::TransferAwaiter send_to(std::span<const std::byte> buffer, const Address& to) noexcept {
    return detail::TransferAwaiter(socket_.engine(), socket_.ref(), io::OpKind::send_to,
                                   const_cast<std::byte*>(buffer.data()), buffer.size(),
                                   const_cast<Address*>(&to));
  }

  /// Sets the default peer: send() goes there, and receive() and receive_from() get only its
  /// datagrams. Never waits. Connecting again changes the peer.
  Result<void> connect(const Address& peer) noexcept;
  /// One datagram from the connected peer (as receive_from, without the sender).
  detail::TransferAwaiter receive(std::span<std::byte> buffer) noexcept {
    return detail::TransferAwaiter(socket_.engine(), socket_.ref(), io::OpKind::receive_from,
                                   buffer.data(), buffer.size(), nullptr);
  }
  /// Sends `buffer` as one datagram to the connected peer; without one, an error
  /// (destination_address_required on Linux, not_connected on Windows; wine: invalid_argument).
  detail::TransferAwaiter send(std::span<const std::byte> buffer) noexcept {
    return detail::TransferAwaiter(socket_.engine(), socket_.ref(), io::OpKind::send,
                                   const_cast<std::byte*>(buffer.data()), buffer.size());
  }

  Result<Address> local_address() const noexcept { return socket_.local_address(); }
  /// The connected peer; not_connected before connect().
  Result<Address> peer_address() const noexcept { return peer(); }
  /// Closes now; pending operations complete with operation_canceled. Idempotent. Afterwards
  /// this object owns no descriptor (the engine closes the handle).
  void close() noexcept { socket_.close(); }

 protected:
  DatagramSocket() = default;
  DatagramSocket(io::Engine& engine, io::DescriptorRef socket) noexcept
      : BasicSocket(engine, socket) {}
};

}  // namespace arbor
