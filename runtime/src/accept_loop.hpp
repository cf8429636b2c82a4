// accept_loop: a listener's accept as every listener type runs it (TcpListener, UnixListener).
//
// It rides out descriptor exhaustion: on EMFILE/ENFILE/ENOBUFS/ENOMEM it waits (1 ms, doubling
// to 100 ms) and tries again instead of failing or spinning, and logs once per episode. A
// connection the peer aborted before it was accepted is skipped. A template, so each listener's
// accept() returns this coroutine itself (no frame of its own around it).
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "arbor/internal/log.hpp"
#include "arbor/runtime/attached_socket.hpp"
#include "arbor/runtime/io_awaiter.hpp"
#include "arbor/runtime/task.hpp"
#include "arbor/runtime/timer.hpp"

namespace arbor::detail {

inline bool is_exhaustion(const std::error_code& e) noexcept {
  if (e.category() != errno_category()) return false;
  const int v = e.value();
  return v == EMFILE || v == ENFILE || v == ENOBUFS || v == ENOMEM;
}

// The peer went away between the handshake and accept(): not the listener's problem.
inline bool is_peer_abort(const std::error_code& e) noexcept {
  if (e.category() != errno_category()) return false;
  const int v = e.value();
  return v == ECONNABORTED || v == EPROTO || v == EPERM;
}

/// Accepts the next connection on `socket_` (which must outlive the task) as a `Stream`;
/// `peer` (if given) receives its address.
template <class Stream>
Task<Result<Stream>> accept_loop(AttachedSocket& socket_, Address* peer) {
  using std::chrono::milliseconds;
  milliseconds backoff{0};
  for (;;) {
    io::Engine* engine = socket_.engine();
    auto handle =
        co_await detail::AcceptAwaiter(engine, socket_.ref(), io::OpKind::accept, nullptr, 0, peer);
    if (handle) {
      if (backoff.count() != 0) log::info("accept: descriptors available again");
      auto attached = engine->attach_stream(*handle);  // accepted non-blocking: no checks
      if (!attached) {
        if (is_exhaustion(attached.error())) continue;
        co_return attached.error();
      }
      co_return Stream(*engine, *attached);
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

}  // namespace arbor::detail
