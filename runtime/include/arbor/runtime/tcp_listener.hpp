// TcpListener: a listening TCP socket for tasks.
//
//   auto listener = arbor::TcpListener::bind(rt, *arbor::Address::parse("127.0.0.1:8080"));
//   for (;;) {
//     auto stream = co_await listener->accept();
//     ...
//   }
//
// accept() rides out descriptor exhaustion: on EMFILE/ENFILE/ENOBUFS/ENOMEM it waits (1 ms,
// doubling to 100 ms) and tries again instead of failing or spinning, and logs once per
// episode. A connection the peer aborted before it was accepted is skipped. Cancelling the
// task (or closing the listener) ends a pending accept with operation_canceled.
#pragma once

#include "arbor/address.hpp"
#include "arbor/io/engine.hpp"
#include "arbor/result.hpp"
#include "arbor/runtime/basic_socket.hpp"
#include "arbor/runtime/tcp_stream.hpp"

namespace arbor {

struct ListenOptions {
  int backlog = 1024;
  bool reuse_address = true;
  /// SO_REUSEPORT: several listeners (processes) share the port; the kernel spreads accepts.
  bool reuse_port = false;
};

class TcpListener : public BasicSocket {
 public:
  TcpListener() = default;
  static Result<TcpListener> bind(Runtime& runtime, const Address& address,
                                  ListenOptions options = {}) noexcept;

  /// The next connection; `peer` (if given) receives its address.
  Task<Result<TcpStream>> accept(Address* peer = nullptr);
  /// The bound address (with the real port when bound to port 0).
  Result<Address> local_address() const noexcept { return socket_.local_address(); }
  /// Closes now: when it returns, connects to the address are refused and it can be bound
  /// again; a pending accept completes with operation_canceled, and connections the engine had
  /// accepted for it but not handed out are closed. Idempotent. Afterwards this object owns
  /// no descriptor (the engine closes the handle).
  void close() noexcept { socket_.close(); }

  /// Options accepted connections inherit (on Linux and Windows): TCP_NODELAY, keep-alive and
  /// the buffer sizes (BasicSocket) set here apply to every stream accept() returns.
  Result<void> set_no_delay(bool on) noexcept { return set(io::BoolOption::no_delay, on); }
  Result<void> set_keep_alive(bool on) noexcept { return set(io::BoolOption::keep_alive, on); }
  /// Whether SO_REUSEPORT is on (ListenOptions::reuse_port sets it before the bind, the only
  /// time it matters); Windows has no such option (no_protocol_option).
  Result<bool> reuse_port() const noexcept { return get(io::BoolOption::reuse_port); }

 private:
  TcpListener(io::Engine& engine, io::DescriptorRef socket) noexcept
      : BasicSocket(engine, socket) {}
};

}  // namespace arbor
