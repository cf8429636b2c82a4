// UdpSocket's synchronous half: bind, connect and the multicast options, each the io:: call on
// the socket's handle (bad_file_descriptor once closed).
#include "arbor/runtime/udp_socket.hpp"

#include "arbor/io/socket.hpp"
#include "arbor/runtime/runtime.hpp"

namespace arbor {

Result<UdpSocket> UdpSocket::bind(Runtime& runtime, const Address& address,
                                  UdpBindOptions options) noexcept {
  auto handle = io::open_socket(address, io::SocketType::udp);
  if (!handle) return handle.error();
  auto fail = [&](std::error_code e) {
    io::close_handle(*handle);
    return e;
  };
  if (options.reuse_address)
    if (auto e = io::set_option(*handle, io::BoolOption::reuse_address, true)) return fail(e);
  if (options.reuse_port)
    if (auto e = io::set_option(*handle, io::BoolOption::reuse_port, true)) return fail(e);
  if (auto e = io::bind(*handle, address)) return fail(e);
  auto descriptor = runtime.engine().attach(*handle);
  if (!descriptor) return descriptor.error();
  return UdpSocket(runtime.engine(), *descriptor);
}

Result<void> DatagramSocket::connect(const Address& peer) noexcept {
  auto h = socket_.handle();
  if (!h) return h.error();
  return io::connect_now(*h, peer);
}

Result<void> UdpSocket::membership_v4(const Address& group, const Address& local_interface,
                                      io::Membership how) noexcept {
  auto h = socket_.handle();
  if (!h) return h.error();
  return io::multicast_membership_v4(*h, group, local_interface, how);
}

Result<void> UdpSocket::membership_v6(const Address& group, std::uint32_t index,
                                      io::Membership how) noexcept {
  auto h = socket_.handle();
  if (!h) return h.error();
  return io::multicast_membership_v6(*h, group, index, how);
}

Result<void> UdpSocket::join_multicast_v4(const Address& group,
                                          const Address& local_interface) noexcept {
  return membership_v4(group, local_interface, io::Membership::join);
}
Result<void> UdpSocket::leave_multicast_v4(const Address& group,
                                           const Address& local_interface) noexcept {
  return membership_v4(group, local_interface, io::Membership::leave);
}
Result<void> UdpSocket::join_multicast_v6(const Address& group, std::uint32_t index) noexcept {
  return membership_v6(group, index, io::Membership::join);
}
Result<void> UdpSocket::leave_multicast_v6(const Address& group, std::uint32_t index) noexcept {
  return membership_v6(group, index, io::Membership::leave);
}

Result<void> UdpSocket::set_multicast_interface_v4(const Address& local_interface) noexcept {
  auto h = socket_.handle();
  if (!h) return h.error();
  return io::set_multicast_interface_v4(*h, local_interface);
}

}  // namespace arbor
