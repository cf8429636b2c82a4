// copy and copy_bidirectional: move bytes between streams until they end.
//
//   auto n = co_await arbor::copy(reader, out);               // Result<std::uint64_t>
//   auto both = co_await arbor::copy_bidirectional(client, upstream);
//   if (both) log(both->a_to_b, both->b_to_a);                 // bytes each way
//
// Invariant: copy_bidirectional passes each direction's end on (half-close): when `a` ends its
// stream, `b`'s write side is shut down (and the other way round), and the call returns only
// when both directions have ended, or on the first error, which cancels the other direction
// and is what it returns. Nothing it started outlives it (a task group holds both).
//
// Buffers: copy(reader, to) uses the reader's own buffer (and copies what it already had
// first); copy(from, to, buffer) the caller's; copy_bidirectional allocates one buffer per
// direction, once per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "arbor/result.hpp"
#include "arbor/runtime/buffered_reader.hpp"
#include "arbor/runtime/byte_stream.hpp"
#include "arbor/runtime/task.hpp"
#include "arbor/runtime/task_group.hpp"

namespace arbor {

/// Bytes copied each way by copy_bidirectional(a, b).
struct CopyCounts {
  std::uint64_t a_to_b = 0;
  std::uint64_t b_to_a = 0;
};

namespace detail {
template <WriteStream W>
Task<Result<void>> write_all_to(W& to, std::span<const std::byte> data) {
  while (!data.empty()) {
    auto n = co_await to.write_some(data);
    if (!n) co_return n.error();
    data = data.subspan(*n);
  }
  co_return Result<void>{};
}
}  // namespace detail

/// Copies `from` to `to` until `from` ends (its buffered bytes first); the bytes copied. Does
/// not end `to`'s stream.
template <ReadStream R, WriteStream W>
Task<Result<std::uint64_t>> copy(BufferedReader<R>& from, W& to) {
  std::uint64_t total = 0;
  for (;;) {
    auto chunk = co_await from.fill();
    if (!chunk) co_return chunk.error();
    if (chunk->empty()) co_return total;
    if (auto w = co_await detail::write_all_to(to, *chunk); !w) co_return w.error();
    total += chunk->size();
    from.consume(chunk->size());
  }
}

/// Copies `from` to `to` through `buffer` until `from` ends; the bytes copied. Does not end
/// `to`'s stream.
template <ReadStream R, WriteStream W>
Task<Result<std::uint64_t>> copy(R& from, W& to, std::span<std::byte> buffer) {
  std::uint64_t total = 0;
  for (;;) {
    auto n = co_await from.read_some(buffer);
    if (!n) co_return n.error();
    if (*n == 0) co_return total;
    if (auto w = co_await detail::write_all_to(to, buffer.first(*n)); !w) co_return w.error();
    total += *n;
  }
}

namespace detail {
// One direction of copy_bidirectional: copies, then passes the end on to `to`.
template <ReadStream R, DuplexStream W>
Task<Result<void>> copy_then_shutdown(R& from, W& to, std::span<std::byte> buffer,
                                      std::uint64_t& count) {
  for (;;) {
    auto n = co_await from.read_some(buffer);
    if (!n) co_return n.error();
    if (*n == 0) co_return to.shutdown_write();
    if (auto w = co_await write_all_to(to, buffer.first(*n)); !w) co_return w.error();
    count += *n;  // counted as it goes, so a caller cancelling us still sees the progress
  }
}
}  // namespace detail

/// Copies `a` to `b` and `b` to `a` at once, each direction through a buffer of
/// `buffer_size` bytes, shutting down the write side of one when the other ends. The counts
/// once both have ended; the first error otherwise (the other direction is cancelled).
/// Cancelling the caller cancels both directions (operation_canceled).
template <DuplexStream A, DuplexStream B>
Task<Result<CopyCounts>> copy_bidirectional(A& a, B& b, std::size_t buffer_size = 16 * 1024) {
  if (buffer_size == 0) buffer_size = 1;
  std::unique_ptr<std::byte[]> buffers(new std::byte[2 * buffer_size]);
  const std::span<std::byte> ab(buffers.get(), buffer_size);
  const std::span<std::byte> ba(buffers.get() + buffer_size, buffer_size);
  CopyCounts counts;
  auto result =
      co_await task_group<Result<void>>([&](TaskGroup<Result<void>>& both) -> Task<Result<void>> {
        both.spawn(detail::copy_then_shutdown(a, b, ab, counts.a_to_b));
        both.spawn(detail::copy_then_shutdown(b, a, ba, counts.b_to_a));
        Result<void> first_error;
        while (auto r = co_await both.next())  // each direction's result, as it ends
          if (!*r && first_error) {
            first_error = *r;
            both.cancel();  // the other direction stops too
          }
        co_return first_error;
      });
  if (!result) co_return result.error();
  co_return counts;
}

}  // namespace arbor
