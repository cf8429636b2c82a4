#include "arbor/runtime/udp_socket.hpp"

#include "arbor/io/socket.hpp"
#include "arbor/runtime/runtime.hpp"

namespace arbor {

Result<UdpSocket> UdpSocket::bind(Runtime& runtime, const Address& address) noexcept {
  auto handle = io::open_socket(address, io::SocketType::udp);
  if (!handle) return handle.error();
  if (auto e = io::bind(*handle, address)) {
    io::close_handle(*handle);
    return e;
  }
  auto descriptor = runtime.engine().attach(*handle);
  if (!descriptor) return descriptor.error();
  return UdpSocket(runtime.engine(), *descriptor);
}

}  // namespace arbor
