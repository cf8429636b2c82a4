// The engine-private area of an Operation: how a backend keeps per-operation state (io_uring's
// msghdr and hand-off link, epoll's readiness generation, IOCP's OVERLAPPED) without the
// public Operation naming any backend.
//
// Lifetime: the backend's start() constructs its state with emplace_state() before the
// operation can be seen by any other thread; everything after reaches it with state_of().
// States are trivially destructible, so an operation that finishes simply abandons its state.
#pragma once

#include <new>
#include <type_traits>

#include "arbor/io/operation.hpp"

namespace arbor::io {

template <class S>
S& emplace_state(Operation& op) noexcept {
  static_assert(sizeof(S) <= kOperationStateSize, "engine state too large for Operation");
  static_assert(alignof(S) <= alignof(std::max_align_t));
  static_assert(std::is_trivially_destructible_v<S>, "Operation never destroys its state");
  // Default-initialised, not value-initialised: members without an initializer (io_uring's
  // msghdr, written only by the kinds that use it) cost nothing on every start.
  return *::new (static_cast<void*>(op.engine_state)) S;
}

template <class S>
S& state_of(Operation& op) noexcept {
  return *std::launder(reinterpret_cast<S*>(op.engine_state));
}

}  // namespace arbor::io
