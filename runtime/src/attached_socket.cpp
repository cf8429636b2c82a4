#include "arbor/runtime/attached_socket.hpp"

#include "arbor/io/socket.hpp"

namespace arbor::detail {

AttachedSocket& AttachedSocket::operator=(AttachedSocket&& other) noexcept {
  if (this != &other) {
    close();
    engine_ = other.engine_;
    generation_ = other.generation_;
    descriptor_.store(other.descriptor_.exchange(nullptr), std::memory_order_release);
  }
  return *this;
}

void AttachedSocket::close() noexcept {
  if (io::Descriptor* d = descriptor_.exchange(nullptr, std::memory_order_acq_rel))
    engine_->close({d, generation_});
}

Result<io::Handle> AttachedSocket::handle() const noexcept {
  const io::DescriptorRef socket = ref();
  if (socket.descriptor == nullptr) return std::make_error_code(std::errc::bad_file_descriptor);
  return io::Engine::handle(socket);
}

Result<Address> AttachedSocket::local_address() const noexcept {
  auto h = handle();
  if (!h) return h.error();
  return io::local_address(*h);
}

}  // namespace arbor::detail
