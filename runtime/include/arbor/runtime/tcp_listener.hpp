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

#include <atomic>

#include "arbor/io/address.hpp"
#include "arbor/io/engine.hpp"
#include "arbor/io/result.hpp"
#include "arbor/runtime/tcp_stream.hpp"

namespace arbor {

struct ListenOptions {
  int backlog = 1024;
  bool reuse_address = true;
  /// SO_REUSEPORT: several listeners (processes) share the port; the kernel spreads accepts.
  bool reuse_port = false;
};

class TcpListener {
 public:
  TcpListener() = default;
  static Result<TcpListener> bind(Runtime& runtime, const Address& address,
                                  ListenOptions options = {}) noexcept;
  TcpListener(TcpListener&& other) noexcept;
  TcpListener& operator=(TcpListener&& other) noexcept;
  ~TcpListener() { close(); }

  /// The next connection; `peer` (if given) receives its address.
  Task<Result<TcpStream>> accept(Address* peer = nullptr);
  /// The bound address (with the real port when bound to port 0).
  Result<Address> local_address() const noexcept;
  void close() noexcept;
  bool is_open() const noexcept { return descriptor_.load(std::memory_order_acquire) != nullptr; }

 private:
  TcpListener(io::Engine& engine, io::Descriptor* d) noexcept : engine_(&engine), descriptor_(d) {}
  io::Engine* engine_ = nullptr;
  std::atomic<io::Descriptor*> descriptor_{nullptr};
};

}  // namespace arbor
