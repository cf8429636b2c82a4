#include "arbor/runtime/tcp_listener.hpp"

#include "accept_loop.hpp"
#include "arbor/io/socket.hpp"
#include "arbor/runtime/runtime.hpp"
#include "arbor/runtime/timer.hpp"

namespace arbor {

Result<TcpListener> TcpListener::bind(Runtime& runtime, const Address& address,
                                      ListenOptions options) noexcept {
  auto handle = io::open_socket(address, io::SocketType::tcp);
  if (!handle) return handle.error();
  auto fail = [&](std::error_code e) {
    io::close_handle(*handle);
    return e;
  };
  if (options.reuse_address)
    if (auto e = io::set_option(*handle, io::BoolOption::reuse_address, true)) return fail(e);
  if (options.reuse_port)
    if (auto e = io::set_option(*handle, io::BoolOption::reuse_port, true)) return fail(e);
  if (auto e = io::bind(*handle, address)) return fail(e);
  if (auto e = io::listen(*handle, options.backlog)) return fail(e);
  auto descriptor = runtime.engine().attach(*handle);
  if (!descriptor) return descriptor.error();
  return TcpListener(runtime.engine(), *descriptor);
}

Task<Result<TcpStream>> TcpListener::accept(Address* peer) {
  return detail::accept_loop<TcpStream>(socket_, peer);
}

}  // namespace arbor
