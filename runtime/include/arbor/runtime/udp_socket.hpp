// UdpSocket: datagrams for tasks.
//
//   auto socket = arbor::UdpSocket::bind(rt, *arbor::Address::parse("127.0.0.1:0"));
//   arbor::Address from;
//   auto n = co_await socket->receive_from(buffer, from);
//   co_await socket->send_to(reply, from);
#pragma once

#include <atomic>
#include <span>

#include "arbor/io/address.hpp"
#include "arbor/io/engine.hpp"
#include "arbor/io/result.hpp"
#include "arbor/runtime/io_awaiter.hpp"

namespace arbor {

class Runtime;

class UdpSocket {
 public:
  UdpSocket() = default;
  static Result<UdpSocket> bind(Runtime& runtime, const Address& address) noexcept;
  UdpSocket(UdpSocket&& other) noexcept;
  UdpSocket& operator=(UdpSocket&& other) noexcept;
  ~UdpSocket() { close(); }

  /// One datagram into `buffer` (truncated if larger); `from` receives the sender.
  detail::TransferAwaiter receive_from(std::span<std::byte> buffer, Address& from) noexcept {
    return detail::TransferAwaiter(engine_, descriptor_.load(std::memory_order_acquire),
                                   io::OpKind::receive_from, buffer.data(), buffer.size(), &from);
  }
  /// Sends `buffer` as one datagram to `to` (which must outlive the await).
  detail::TransferAwaiter send_to(std::span<const std::byte> buffer, const Address& to) noexcept {
    return detail::TransferAwaiter(engine_, descriptor_.load(std::memory_order_acquire),
                                   io::OpKind::send_to, const_cast<std::byte*>(buffer.data()),
                                   buffer.size(), const_cast<Address*>(&to));
  }
  Result<Address> local_address() const noexcept;
  void close() noexcept;

 private:
  UdpSocket(io::Engine& engine, io::Descriptor* d) noexcept : engine_(&engine), descriptor_(d) {}
  io::Engine* engine_ = nullptr;
  std::atomic<io::Descriptor*> descriptor_{nullptr};
};

}  // namespace arbor
