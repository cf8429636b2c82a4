// UdpSocket: datagrams for tasks.
//
//   auto socket = arbor::UdpSocket::bind(rt, *arbor::Address::parse("127.0.0.1:0"));
//   arbor::Address from;
//   auto n = co_await socket->receive_from(buffer, from);
//   co_await socket->send_to(reply, from);
#pragma once

#include <span>

#include "arbor/address.hpp"
#include "arbor/io/engine.hpp"
#include "arbor/result.hpp"
#include "arbor/runtime/attached_socket.hpp"
#include "arbor/runtime/io_awaiter.hpp"

namespace arbor {

class Runtime;

class UdpSocket {
 public:
  UdpSocket() = default;
  static Result<UdpSocket> bind(Runtime& runtime, const Address& address) noexcept;

  /// One datagram into `buffer` (truncated if larger); `from` receives the sender.
  detail::TransferAwaiter receive_from(std::span<std::byte> buffer, Address& from) noexcept {
    return detail::TransferAwaiter(socket_.engine(), socket_.ref(), io::OpKind::receive_from,
                                   buffer.data(), buffer.size(), &from);
  }
  /// Sends `buffer` as one datagram to `to` (which must outlive the await).
  detail::TransferAwaiter send_to(std::span<const std::byte> buffer, const Address& to) noexcept {
    return detail::TransferAwaiter(socket_.engine(), socket_.ref(), io::OpKind::send_to,
                                   const_cast<std::byte*>(buffer.data()), buffer.size(),
                                   const_cast<Address*>(&to));
  }
  Result<Address> local_address() const noexcept { return socket_.local_address(); }
  /// Closes now; pending operations complete with operation_canceled. Idempotent. Afterwards
  /// this object owns no descriptor (the engine closes the handle).
  void close() noexcept { socket_.close(); }

 private:
  UdpSocket(io::Engine& engine, io::DescriptorRef socket) noexcept : socket_(engine, socket) {}
  detail::AttachedSocket socket_;
};

}  // namespace arbor
