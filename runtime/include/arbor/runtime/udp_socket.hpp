// UdpSocket: datagrams for tasks.
//
//   auto socket = arbor::UdpSocket::bind(rt, *arbor::Address::parse("127.0.0.1:0"));
//   arbor::Address from;
//   auto n = co_await socket->receive_from(buffer, from);
//   co_await socket->send_to(reply, from);
//
// Or, with a default peer: connect() (synchronous: the kernel only records the peer), then
// send() and receive(), which take datagrams from that peer alone.
//
// One datagram per receive. One longer than the buffer fails with message_size (EMSGSIZE) on
// every engine, and is gone (the kernel discards it, as it does the tail of any truncated
// datagram): a reader that may meet long datagrams uses a buffer of the largest it accepts
// (65507 bytes takes any UDP datagram over IPv4). At most one receive and one send may be
// pending at a time (a second gets device_or_resource_busy); close() completes them with
// operation_canceled.
#pragma once

#include <cstdint>
#include <span>

#include "arbor/address.hpp"
#include "arbor/io/engine.hpp"
#include "arbor/result.hpp"
#include "arbor/runtime/basic_socket.hpp"
#include "arbor/runtime/io_awaiter.hpp"

namespace arbor {

class Runtime;

/// How UdpSocket::bind sets the socket up before it binds (when these options matter).
struct UdpBindOptions {
  /// SO_REUSEADDR: several sockets may bind the same multicast group's port.
  bool reuse_address = false;
  /// SO_REUSEPORT: several sockets bound to the address share its datagrams (Linux; Windows
  /// has no such option and bind fails with no_protocol_option).
  bool reuse_port = false;
};

class UdpSocket : public BasicSocket {
 public:
  UdpSocket() = default;
  static Result<UdpSocket> bind(Runtime& runtime, const Address& address,
                                UdpBindOptions options = {}) noexcept;

  /// One datagram into `buffer`; `from` receives the sender. message_size if it was longer.
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

  /// Sets the default peer: send() goes there, and receive() and receive_from() get only its
  /// datagrams. Never waits. Connecting again changes the peer.
  Result<void> connect(const Address& peer) noexcept;
  /// One datagram from the connected peer (as receive_from, without the sender). A datagram
  /// the peer could not take may be reported by the next receive as connection_refused.
  detail::TransferAwaiter receive(std::span<std::byte> buffer) noexcept {
    return detail::TransferAwaiter(socket_.engine(), socket_.ref(), io::OpKind::receive_from,
                                   buffer.data(), buffer.size(), nullptr);
  }
  /// Sends `buffer` as one datagram to the connected peer (not_connected without one, or
  /// destination_address_required on Windows).
  detail::TransferAwaiter send(std::span<const std::byte> buffer) noexcept {
    return detail::TransferAwaiter(socket_.engine(), socket_.ref(), io::OpKind::send,
                                   const_cast<std::byte*>(buffer.data()), buffer.size());
  }

  /// SO_BROADCAST: whether send_to may aim at a broadcast address (else permission_denied).
  Result<void> set_broadcast(bool on) noexcept { return set(io::BoolOption::broadcast, on); }
  Result<bool> broadcast() const noexcept { return get(io::BoolOption::broadcast); }

  /// Joins or leaves an IPv4 multicast group on the interface with address `interface`
  /// (0.0.0.0: the system's choice). A group outside 224.0.0.0/4 is invalid_argument.
  Result<void> join_multicast_v4(const Address& group, const Address& interface) noexcept;
  Result<void> leave_multicast_v4(const Address& group, const Address& interface) noexcept;
  /// The same for IPv6, on the interface with index `interface_index` (0: the system's).
  Result<void> join_multicast_v6(const Address& group, std::uint32_t interface_index) noexcept;
  Result<void> leave_multicast_v6(const Address& group, std::uint32_t interface_index) noexcept;
  /// The interface (by IPv4 address) multicast datagrams leave from.
  Result<void> set_multicast_interface_v4(const Address& interface) noexcept;
  /// Whether this host's members of a group receive what this socket sends to it (default on).
  Result<void> set_multicast_loop_v4(bool on) noexcept {
    return set(io::BoolOption::multicast_loop_v4, on);
  }

  Result<Address> local_address() const noexcept { return socket_.local_address(); }
  /// The connected peer; not_connected before connect().
  Result<Address> peer_address() const noexcept { return peer(); }
  /// Closes now; pending operations complete with operation_canceled. Idempotent. Afterwards
  /// this object owns no descriptor (the engine closes the handle).
  void close() noexcept { socket_.close(); }

 private:
  UdpSocket(io::Engine& engine, io::DescriptorRef socket) noexcept : BasicSocket(engine, socket) {}
  Result<void> membership_v4(const Address& group, const Address& interface,
                             io::Membership how) noexcept;
  Result<void> membership_v6(const Address& group, std::uint32_t index,
                             io::Membership how) noexcept;
};

}  // namespace arbor
