#include "arbor/runtime/tcp_stream.hpp"

#include <algorithm>
#include <array>

#include "arbor/io/socket.hpp"
#include "arbor/runtime/error.hpp"
#include "arbor/runtime/runtime.hpp"
#include "arbor/runtime/timer.hpp"

namespace arbor {

Task<Result<TcpStream>> TcpStream::connect(Runtime& runtime, Address address) {
  auto handle = io::open_socket(address, io::SocketType::tcp);
  if (!handle) co_return handle.error();
  io::Engine& engine = runtime.engine();
  auto descriptor = engine.attach_stream(*handle);  // opened non-blocking: no checks
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

Result<void> TcpStream::set_keep_alive(const io::KeepAlive& timing) noexcept {
  auto h = socket_.handle();
  if (!h) return h.error();
  return io::set_keep_alive(*h, timing);
}

Result<io::KeepAlive> TcpStream::keep_alive_timing() const noexcept {
  auto h = socket_.handle();
  if (!h) return h.error();
  return io::get_keep_alive(*h);
}

Result<void> TcpStream::set_linger_reset() noexcept {
  auto h = socket_.handle();
  if (!h) return h.error();
  return io::set_linger_reset(*h);
}

}  // namespace arbor
