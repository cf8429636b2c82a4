// BasicSocket: each option is the io:: call on the socket's handle, looked up per call so a
// closed socket fails cleanly (bad_file_descriptor) instead of touching a recycled handle.
#include "arbor/runtime/basic_socket.hpp"

namespace arbor {

io::Handle BasicSocket::native_handle() const noexcept {
  auto h = socket_.handle();
  return h ? *h : io::kInvalidHandle;
}

Result<void> BasicSocket::set_receive_buffer_size(int bytes) noexcept {
  auto h = socket_.handle();
  if (!h) return h.error();
  return io::set_option(*h, io::IntOption::receive_buffer, bytes);
}

Result<int> BasicSocket::receive_buffer_size() const noexcept {
  auto h = socket_.handle();
  if (!h) return h.error();
  return io::get_option(*h, io::IntOption::receive_buffer);
}

Result<void> BasicSocket::set_send_buffer_size(int bytes) noexcept {
  auto h = socket_.handle();
  if (!h) return h.error();
  return io::set_option(*h, io::IntOption::send_buffer, bytes);
}

Result<int> BasicSocket::send_buffer_size() const noexcept {
  auto h = socket_.handle();
  if (!h) return h.error();
  return io::get_option(*h, io::IntOption::send_buffer);
}

Result<void> BasicSocket::set_linger(std::optional<std::chrono::seconds> timeout) noexcept {
  auto h = socket_.handle();
  if (!h) return h.error();
  return io::set_linger(*h, timeout);
}

Result<std::optional<std::chrono::seconds>> BasicSocket::linger() const noexcept {
  auto h = socket_.handle();
  if (!h) return h.error();
  return io::get_linger(*h);
}

Result<void> BasicSocket::set(io::BoolOption option, bool value) noexcept {
  auto h = socket_.handle();
  if (!h) return h.error();
  return io::set_option(*h, option, value);
}

Result<bool> BasicSocket::get(io::BoolOption option) const noexcept {
  auto h = socket_.handle();
  if (!h) return h.error();
  return io::get_option(*h, option);
}

Result<Address> BasicSocket::peer() const noexcept {
  auto h = socket_.handle();
  if (!h) return h.error();
  return io::peer_address(*h);
}

}  // namespace arbor
