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

UdpSocket::UdpSocket(UdpSocket&& other) noexcept
    : engine_(other.engine_), descriptor_(other.descriptor_.exchange(nullptr)) {}

UdpSocket& UdpSocket::operator=(UdpSocket&& other) noexcept {
  if (this != &other) {
    close();
    engine_ = other.engine_;
    descriptor_.store(other.descriptor_.exchange(nullptr), std::memory_order_release);
  }
  return *this;
}

Result<Address> UdpSocket::local_address() const noexcept {
  io::Descriptor* d = descriptor_.load(std::memory_order_acquire);
  if (d == nullptr) return std::make_error_code(std::errc::bad_file_descriptor);
  return io::local_address(io::Engine::handle(d));
}

void UdpSocket::close() noexcept {
  if (io::Descriptor* d = descriptor_.exchange(nullptr, std::memory_order_acq_rel))
    engine_->close(d);
}

}  // namespace arbor
