// TcpStream: a connected TCP socket for tasks.
//
//   auto stream = co_await arbor::TcpStream::connect(rt, address);
//   if (!stream) { ... stream.error() ... }
//   auto n = co_await stream->read_some(buffer);   // Result<std::size_t>; 0 = peer closed
//   co_await stream->write_all(reply);             // Result<void>
//
// The reads, writes, shutdown_write and close are StreamSocket's (shared with UnixStream),
// which says what may be pending at once and how close() ends it.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <string_view>

#include "arbor/address.hpp"
#include "arbor/io/engine.hpp"
#include "arbor/result.hpp"
#include "arbor/runtime/stream_socket.hpp"
#include "arbor/runtime/task.hpp"

namespace arbor {

class Runtime;

class TcpStream : public StreamSocket {
 public:
  TcpStream() = default;
  /// Adopts an attached socket (what Engine::attach returns; TcpListener::accept and connect
  /// use it).
  TcpStream(io::Engine& engine, io::DescriptorRef socket) noexcept : StreamSocket(engine, socket) {}

  /// Connects to `address`; with a timeout, gives timed_out when it passes.
  static Task<Result<TcpStream>> connect(Runtime& runtime, Address address);
  static Task<Result<TcpStream>> connect(Runtime& runtime, Address address,
                                         std::chrono::milliseconds timeout);
  /// Connects to "host:port" or "[v6]:port": resolves it (resolve.hpp), then tries the
  /// addresses Happy Eyeballs style (happy_eyeballs.hpp). The text is copied at the call.
  static Task<Result<TcpStream>> connect(Runtime& runtime, std::string_view host_port);
  static Task<Result<TcpStream>> connect(Runtime& runtime, std::string_view host_port,
                                         std::chrono::milliseconds timeout);

  /// TCP_NODELAY: segments leave at once instead of waiting to coalesce (Nagle).
  Result<void> set_no_delay(bool on) noexcept { return set(io::BoolOption::no_delay, on); }
  Result<bool> no_delay() const noexcept { return get(io::BoolOption::no_delay); }
  /// SO_KEEPALIVE with the system's timing, or (the second) with `timing`.
  Result<void> set_keep_alive(bool on) noexcept { return set(io::BoolOption::keep_alive, on); }
  Result<void> set_keep_alive(const io::KeepAlive& timing) noexcept;
  Result<bool> keep_alive() const noexcept { return get(io::BoolOption::keep_alive); }
  Result<io::KeepAlive> keep_alive_timing() const noexcept;
  /// Makes close() send a reset (RST) instead of a FIN.
  Result<void> set_linger_reset() noexcept;
  Result<Address> local_address() const noexcept { return socket_.local_address(); }
  Result<Address> peer_address() const noexcept { return peer(); }
};

}  // namespace arbor
