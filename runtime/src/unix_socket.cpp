// UnixStream, UnixListener and UnixDatagram: making and attaching the sockets. Everything after
// that (reads, writes, accepts, datagrams) is the shared stream, datagram and accept code.
#include "arbor/runtime/unix_socket.hpp"

#include "accept_loop.hpp"
#include "arbor/io/socket.hpp"
#include "arbor/runtime/runtime.hpp"

namespace arbor {
namespace {

std::error_code not_unix() noexcept {
  return std::make_error_code(std::errc::address_family_not_supported);
}

// A new socket of `type` for the Unix address `address`, bound to it when `bind`; owned by the
// caller.
Result<io::Handle> open_bound(const Address& address, io::SocketType type, bool bind) noexcept {
  if (!address.is_unix()) return not_unix();
#if defined(_WIN32)
  // Windows' AF_UNIX (10 1803 on) is stream-only, and the IOCP engine's accept and connect
  // are made for TCP: rather than half a socket type, none (unix_socket.hpp).
  (void)type;
  (void)bind;
  return std::make_error_code(std::errc::operation_not_supported);
#endif
  auto handle = io::open_socket(address, type);
  if (!handle) return handle.error();
  if (bind)
    if (auto e = io::bind(*handle, address)) {
      io::close_handle(*handle);
      return e;
    }
  return *handle;
}

// Both ends of a socketpair attached to `engine`, as `Socket`s (made by `make`).
template <class Socket, class Make>
Result<std::pair<Socket, Socket>> attach_pair(io::Engine& engine, io::SocketType type,
                                              Make make) noexcept {
  auto handles = io::socket_pair(type);
  if (!handles) return handles.error();
  auto first = engine.attach(handles->first);  // closes it on failure
  if (!first) {
    io::close_handle(handles->second);
    return first.error();
  }
  Socket a = make(*first);  // closes the first from here on
  auto second = engine.attach(handles->second);
  if (!second) return second.error();
  return std::pair<Socket, Socket>(std::move(a), make(*second));
}

}  // namespace

Result<UnixStream> UnixStream::connect(Runtime& runtime, const Address& address) noexcept {
  auto handle = open_bound(address, io::SocketType::stream, false);
  if (!handle) return handle.error();
  // A Unix-domain connect completes (or fails) in the call: there is no handshake to wait for.
  if (auto e = io::connect_now(*handle, address)) {
    io::close_handle(*handle);
    return e;
  }
  io::Engine& engine = runtime.engine();
  auto descriptor = engine.attach(*handle);
  if (!descriptor) return descriptor.error();
  return UnixStream(engine, *descriptor);
}

Result<std::pair<UnixStream, UnixStream>> UnixStream::pair(Runtime& runtime) noexcept {
  io::Engine& engine = runtime.engine();
  return attach_pair<UnixStream>(engine, io::SocketType::stream,
                                 [&](io::DescriptorRef d) { return UnixStream(engine, d); });
}

Result<io::PeerCredentials> UnixStream::peer_credentials() const noexcept {
  auto h = socket_.handle();
  if (!h) return h.error();
  return io::peer_credentials(*h);
}

Result<UnixListener> UnixListener::bind(Runtime& runtime, const Address& address,
                                        int backlog) noexcept {
  auto handle = open_bound(address, io::SocketType::stream, true);
  if (!handle) return handle.error();
  if (auto e = io::listen(*handle, backlog)) {
    io::close_handle(*handle);
    return e;
  }
  auto descriptor = runtime.engine().attach(*handle);
  if (!descriptor) return descriptor.error();
  return UnixListener(runtime.engine(), *descriptor);
}

Task<Result<UnixStream>> UnixListener::accept(Address* peer) {
  return detail::accept_loop<UnixStream>(socket_, peer);
}

Result<UnixDatagram> UnixDatagram::bind(Runtime& runtime, const Address& address) noexcept {
  auto handle = open_bound(address, io::SocketType::datagram, true);
  if (!handle) return handle.error();
  auto descriptor = runtime.engine().attach(*handle);
  if (!descriptor) return descriptor.error();
  return UnixDatagram(runtime.engine(), *descriptor);
}

Result<UnixDatagram> UnixDatagram::unbound(Runtime& runtime) noexcept {
  auto any = Address::unix_abstract("-");  // only its family is used: nothing is bound
  auto handle = open_bound(*any, io::SocketType::datagram, false);
  if (!handle) return handle.error();
  auto descriptor = runtime.engine().attach(*handle);
  if (!descriptor) return descriptor.error();
  return UnixDatagram(runtime.engine(), *descriptor);
}

Result<std::pair<UnixDatagram, UnixDatagram>> UnixDatagram::pair(Runtime& runtime) noexcept {
  io::Engine& engine = runtime.engine();
  return attach_pair<UnixDatagram>(engine, io::SocketType::datagram,
                                   [&](io::DescriptorRef d) { return UnixDatagram(engine, d); });
}

Result<io::PeerCredentials> UnixDatagram::peer_credentials() const noexcept {
  auto h = socket_.handle();
  if (!h) return h.error();
  return io::peer_credentials(*h);
}

}  // namespace arbor
