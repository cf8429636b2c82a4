// Byte-stream concepts: what the buffered reader, the buffered writer and copy() need of a
// stream, and nothing more.
//
// Invariant: a type satisfies these by its shape alone (no base class, no registration), so
// TcpStream fits today and a Unix-domain or TLS stream fits when it offers the same members.
// Every operation is awaited inside a task and gives a Result, as TcpStream's do.
#pragma once

#include <concepts>
#include <cstddef>
#include <span>
#include <type_traits>

#include "arbor/io/operation.hpp"
#include "arbor/result.hpp"
#include "arbor/runtime/task.hpp"

namespace arbor {

namespace detail {
template <class A, class R>
concept AwaitableOf = std::same_as<std::remove_cvref_t<await_result_t<A>>, R>;
}  // namespace detail

/// `co_await s.read_some(buffer)` gives Result<std::size_t>: at least one byte, or 0 when the
/// peer has ended its stream.
template <class S>
concept ReadStream = requires(S& s, std::span<std::byte> buffer) {
  { s.read_some(buffer) } -> detail::AwaitableOf<Result<std::size_t>>;
};

/// `co_await s.write_some(buffer)` gives Result<std::size_t>: at least one byte written.
template <class S>
concept WriteStream = requires(S& s, std::span<const std::byte> buffer) {
  { s.write_some(buffer) } -> detail::AwaitableOf<Result<std::size_t>>;
};

/// A WriteStream that also takes a gather list in one call (TcpStream does): the buffered
/// writer then sends its buffer and a large write together instead of in two calls.
template <class S>
concept GatherWriteStream = WriteStream<S> &&
    requires(S& s, std::span<const io::ConstBuffer> buffers) {
  { s.write_some(buffers) } -> detail::AwaitableOf<Result<std::size_t>>;
};

/// Both directions, and the write side can be ended alone (TCP's FIN): what
/// copy_bidirectional() needs to pass one direction's end on while the other still runs.
template <class S>
concept DuplexStream = ReadStream<S> && WriteStream<S> && requires(S& s) {
  { s.shutdown_write() } -> std::convertible_to<Result<void>>;
};

}  // namespace arbor
