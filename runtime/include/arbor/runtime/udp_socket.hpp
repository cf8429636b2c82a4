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
// The sends and receives are DatagramSocket's (shared with UnixDatagram): a datagram longer
// than the buffer is message_size, and gone (65507 bytes takes any UDP datagram over IPv4).
#pragma once

#include <cstdint>
#include <span>

#include "arbor/address.hpp"
#include "arbor/io/engine.hpp"
#include "arbor/result.hpp"
#include "arbor/runtime/datagram_socket.hpp"

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

class UdpSocket : public DatagramSocket {
 public:
  UdpSocket() = default;
  static Result<UdpSocket> bind(Runtime& runtime, const Address& address,
                                UdpBindOptions options = {}) noexcept;

  /// SO_BROADCAST: whether send_to may aim at a broadcast address (else permission_denied).
  Result<void> set_broadcast(bool on) noexcept { return set(io::BoolOption::broadcast, on); }
  Result<bool> broadcast() const noexcept { return get(io::BoolOption::broadcast); }

  /// Joins or leaves an IPv4 multicast group on the interface with address `local_interface`
  /// (0.0.0.0: the system's choice). A group outside 224.0.0.0/4 is invalid_argument.
  Result<void> join_multicast_v4(const Address& group, const Address& local_interface) noexcept;
  Result<void> leave_multicast_v4(const Address& group, const Address& local_interface) noexcept;
  /// The same for IPv6, on the interface with index `interface_index` (0: the system's).
  Result<void> join_multicast_v6(const Address& group, std::uint32_t interface_index) noexcept;
  Result<void> leave_multicast_v6(const Address& group, std::uint32_t interface_index) noexcept;
  /// The interface (by IPv4 address) multicast datagrams leave from.
  Result<void> set_multicast_interface_v4(const Address& local_interface) noexcept;
  /// Whether this host's members of a group receive what this socket sends to it (default on).
  Result<void> set_multicast_loop_v4(bool on) noexcept {
    return set(io::BoolOption::multicast_loop_v4, on);
  }

 private:
  UdpSocket(io::Engine& engine, io::DescriptorRef socket) noexcept
      : DatagramSocket(engine, socket) {}
  Result<void> membership_v4(const Address& group, const Address& local_interface,
                             io::Membership how) noexcept;
  Result<void> membership_v6(const Address& group, std::uint32_t index,
                             io::Membership how) noexcept;
};

}  // namespace arbor
