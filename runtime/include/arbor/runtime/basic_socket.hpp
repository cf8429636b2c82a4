// BasicSocket: what every socket type has in common — its OS handle and the options that mean
// the same on each (buffer sizes, linger).
//
// TcpStream, TcpListener and UdpSocket derive from it; their own options (no_delay and
// keep-alive for TCP, broadcast and multicast for UDP) are on them. Every call is synchronous
// and works on the socket as it is now: on a closed socket (or a default-constructed one) it
// fails with bad_file_descriptor. An option the platform lacks is an error
// (no_protocol_option / operation_not_supported), never a silent no-op.
// Ownership: the derived object owns the socket; native_handle() lends the handle, which stays
// the socket's (do not close it) and is invalid once the socket is closed.
#pragma once

#include <chrono>
#include <optional>

#include "arbor/io/socket.hpp"
#include "arbor/result.hpp"
#include "arbor/runtime/attached_socket.hpp"

namespace arbor {

class BasicSocket {
 public:
  /// The OS handle (a file descriptor, or a SOCKET on Windows), or io::kInvalidHandle when
  /// closed. For options arbor has no method for; it stays owned by this socket.
  io::Handle native_handle() const noexcept;
  bool is_open() const noexcept { return socket_.descriptor() != nullptr; }

  /// SO_RCVBUF / SO_SNDBUF. Linux doubles what is set (for its bookkeeping) and reports that.
  Result<void> set_receive_buffer_size(int bytes) noexcept;
  Result<int> receive_buffer_size() const noexcept;
  Result<void> set_send_buffer_size(int bytes) noexcept;
  Result<int> send_buffer_size() const noexcept;

  /// SO_LINGER (io::set_linger): with a timeout, close() blocks the closing thread up to that
  /// long while unsent data leaves; std::nullopt (the default) turns it off.
  Result<void> set_linger(std::optional<std::chrono::seconds> timeout) noexcept;
  Result<std::optional<std::chrono::seconds>> linger() const noexcept;

 protected:
  BasicSocket() = default;
  BasicSocket(io::Engine& engine, io::DescriptorRef socket) noexcept : socket_(engine, socket) {}

  // The handle-taking io:: calls, on this socket's handle (bad_file_descriptor when closed).
  Result<void> set(io::BoolOption option, bool value) noexcept;
  Result<bool> get(io::BoolOption option) const noexcept;
  Result<Address> peer() const noexcept;

  detail::AttachedSocket socket_;
};

}  // namespace arbor
