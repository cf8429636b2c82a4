#include "arbor/runtime/tcp_listener.hpp"

#include <algorithm>
#include <cerrno>

#include "arbor/internal/log.hpp"
#include "arbor/io/socket.hpp"
#include "arbor/runtime/runtime.hpp"
#include "arbor/runtime/timer.hpp"

namespace arbor {

namespace {

bool is_exhaustion(const std::error_code& e) noexcept {
  if (e.category() != errno_category()) return false;
  const int v = e.value();
  return v == EMFILE || v == ENFILE || v == ENOBUFS || v == ENOMEM;
}

// The peer went away between the handshake and accept(): not the listener's problem.
bool is_peer_abort(const std::error_code& e) noexcept {
  if (e.category() != errno_category()) return false;
  const int v = e.value();
  return v == ECONNABORTED || v == EPROTO || v == EPERM;
}

}  // namespace

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
  using std::chrono::milliseconds;
  milliseconds backoff{0};
  for (;;) {
    io::Engine* engine = socket_.engine();
    auto handle =
        co_await detail::AcceptAwaiter(engine, socket_.ref(), io::OpKind::accept, nullptr, 0, peer);
    if (handle) {
      if (backoff.count() != 0) log::info("accept: descriptors available again");
      auto attached = engine->attach(*handle);
      if (!attached) {
        if (is_exhaustion(attached.error())) continue;
        co_return attached.error();
      }
      co_return TcpStream(*engine, *attached);
    }
    const std::error_code error = handle.error();
    if (is_peer_abort(error)) continue;
    if (!is_exhaustion(error)) co_return error;
    // Out of descriptors (or kernel memory): waiting is the only fix, and retrying at once
    // would spin, so back off exponentially while the application closes connections.
    if (backoff.count() == 0) {
      log::warn("accept: {}; backing off until descriptors are free", error.message());
      backoff = milliseconds{1};
    } else {
      backoff = std::min(backoff * 2, milliseconds{100});
    }
    if (auto slept = co_await sleep_for(backoff); !slept) co_return slept.error();
  }
}

}  // namespace arbor
