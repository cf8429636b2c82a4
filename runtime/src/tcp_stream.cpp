#include "arbor/runtime/tcp_stream.hpp"

#include <algorithm>
#include <array>

#include "arbor/io/socket.hpp"
#include "arbor/runtime/error.hpp"
#include "arbor/runtime/runtime.hpp"
#include "arbor/runtime/timer.hpp"

namespace arbor {

namespace {
std::error_code closed_error() {
  return std::make_error_code(std::errc::bad_file_descriptor);
}
}  // namespace

TcpStream::TcpStream(TcpStream&& other) noexcept
    : engine_(other.engine_), descriptor_(other.descriptor_.exchange(nullptr)) {}

TcpStream& TcpStream::operator=(TcpStream&& other) noexcept {
  if (this != &other) {
    close();
    engine_ = other.engine_;
    descriptor_.store(other.descriptor_.exchange(nullptr), std::memory_order_release);
  }
  return *this;
}

Task<Result<TcpStream>> TcpStream::connect(Runtime& runtime, Address address) {
  auto handle = io::open_socket(address, io::SocketType::tcp);
  if (!handle) co_return handle.error();
  io::Engine& engine = runtime.engine();
  auto descriptor = engine.attach(*handle);
  if (!descriptor) co_return descriptor.error();
  TcpStream stream(engine, *descriptor);  // closes the socket on every early return below
  auto connected = co_await detail::StatusAwaiter(&engine, *descriptor, io::OpKind::connect,
                                                  nullptr, 0, &address);
  if (!connected) co_return connected.error();
  co_return std::move(stream);
}

Task<Result<TcpStream>> TcpStream::connect(Runtime& runtime, Address address,
                                           std::chrono::milliseconds timeout) {
  co_return co_await with_timeout(timeout, connect(runtime, address));
}

Task<Result<void>> TcpStream::read_exact(std::span<std::byte> buffer) {
  while (!buffer.empty()) {
    auto n = co_await read_some(buffer);
    if (!n) co_return n.error();
    if (*n == 0) co_return make_error_code(Errc::end_of_stream);
    buffer = buffer.subspan(*n);
  }
  co_return Result<void>{};
}

Task<Result<void>> TcpStream::write_all(std::span<const std::byte> buffer) {
  while (!buffer.empty()) {
    auto n = co_await write_some(buffer);
    if (!n) co_return n.error();
    buffer = buffer.subspan(*n);
  }
  co_return Result<void>{};
}

Task<Result<void>> TcpStream::write_all(std::span<const io::ConstBuffer> buffers) {
  // The kernel may take part of the list; the unsent tail is rebuilt in a small local array
  // (in the frame), in chunks of at most kMax buffers.
  constexpr std::size_t kMax = 64;
  std::array<io::ConstBuffer, kMax> pending;
  std::size_t next = 0;   // first buffer of `buffers` not yet copied into `pending`
  std::size_t count = 0;  // buffers in `pending`
  std::size_t first = 0;  // first unsent entry of `pending`
  for (;;) {
    if (first == count) {
      if (next == buffers.size()) co_return Result<void>{};
      count = std::min(kMax, buffers.size() - next);
      std::copy_n(buffers.begin() + static_cast<std::ptrdiff_t>(next), count, pending.begin());
      next += count;
      first = 0;
      while (first < count && pending[first].size == 0)
        ++first;
      continue;
    }
    auto n = co_await write_some(
        std::span<const io::ConstBuffer>(pending.data() + first, count - first));
    if (!n) co_return n.error();
    std::size_t sent = *n;
    while (first < count && sent >= pending[first].size)
      sent -= pending[first++].size;
    if (first < count) {
      pending[first].data = static_cast<const std::byte*>(pending[first].data) + sent;
      pending[first].size -= sent;
    }
    while (first < count && pending[first].size == 0)
      ++first;
  }
}

Result<void> TcpStream::shutdown_write() noexcept {
  io::Descriptor* d = descriptor();
  if (d == nullptr) return closed_error();
  return io::shutdown_write(io::Engine::handle(d));
}

void TcpStream::close() noexcept {
  if (io::Descriptor* d = descriptor_.exchange(nullptr, std::memory_order_acq_rel))
    engine_->close(d);
}

Result<void> TcpStream::set_no_delay(bool on) noexcept {
  io::Descriptor* d = descriptor();
  if (d == nullptr) return closed_error();
  return io::set_option(io::Engine::handle(d), io::BoolOption::no_delay, on);
}

Result<void> TcpStream::set_keep_alive(bool on) noexcept {
  io::Descriptor* d = descriptor();
  if (d == nullptr) return closed_error();
  return io::set_option(io::Engine::handle(d), io::BoolOption::keep_alive, on);
}

Result<void> TcpStream::set_linger_reset() noexcept {
  io::Descriptor* d = descriptor();
  if (d == nullptr) return closed_error();
  return io::set_linger_reset(io::Engine::handle(d));
}

Result<Address> TcpStream::local_address() const noexcept {
  io::Descriptor* d = descriptor();
  if (d == nullptr) return closed_error();
  return io::local_address(io::Engine::handle(d));
}

Result<Address> TcpStream::peer_address() const noexcept {
  io::Descriptor* d = descriptor();
  if (d == nullptr) return closed_error();
  return io::peer_address(io::Engine::handle(d));
}

io::Handle TcpStream::native_handle() const noexcept {
  io::Descriptor* d = descriptor();
  return d == nullptr ? io::kInvalidHandle : io::Engine::handle(d);
}

}  // namespace arbor
