// BufferedWriter: gathers small writes into one buffer and sends it when full or on flush().
//
//   arbor::BufferedWriter writer(stream);              // 8 KiB, allocated once, here
//   co_await writer.write("HTTP/1.1 200 OK\r\n");      // copied into the buffer: no IO yet
//   co_await writer.write(body);                       // >= capacity: sent directly, no copy
//   if (!co_await writer.flush()) { ... }              // now everything is on the stream
//
// Buffer: one fixed buffer, allocated once by the constructor (owned) or given by the caller
// (borrowed: it must outlive the writer). Nothing allocates per write.
//
// Invariant: bytes reach the stream in the order they were written, and a write that returned
// success is either on the stream or in the buffer. The destructor cannot wait, so it does not
// flush: bytes still buffered then are dropped (flush() before the writer goes). A failed or
// cancelled flush keeps the unsent bytes buffered (a later flush() tries them again); a large
// write that failed part way leaves unsaid how much of it went out (the stream is broken then).
//
// Threading: one task at a time, like the stream's write side. Every awaitable is a Task.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <string_view>

#include "arbor/io/operation.hpp"
#include "arbor/result.hpp"
#include "arbor/runtime/buffer_storage.hpp"
#include "arbor/runtime/byte_stream.hpp"
#include "arbor/runtime/task.hpp"

namespace arbor {

template <WriteStream S>
class BufferedWriter {
 public:
  static constexpr std::size_t kDefaultCapacity = 8 * 1024;

  /// Writes to `stream` (which must outlive the writer) through `capacity` bytes allocated
  /// here, once.
  explicit BufferedWriter(S& stream, std::size_t capacity = kDefaultCapacity)
      : stream_(&stream), storage_(capacity) {}
  /// The same through `storage`, owned by the caller and kept alive as long as the writer.
  BufferedWriter(S& stream, std::span<std::byte> storage) noexcept
      : stream_(&stream), storage_(storage) {}

  BufferedWriter(BufferedWriter&&) noexcept = default;
  BufferedWriter& operator=(BufferedWriter&&) noexcept = default;

  S& stream() const noexcept { return *stream_; }
  std::size_t capacity() const noexcept { return storage_.size(); }
  /// Bytes written but not yet sent.
  std::size_t buffered() const noexcept { return used_; }

  /// Buffers `data`, sending the buffer first if `data` does not fit. `data` as large as the
  /// buffer or larger goes to the stream directly, after (or gathered with) what is buffered.
  Task<Result<void>> write(std::span<const std::byte> data) {
    if (data.size() <= capacity() - used_) {
      append(data);
      co_return Result<void>{};
    }
    if (data.size() < capacity()) {
      if (auto sent = co_await flush(); !sent) co_return sent;
      append(data);
      co_return Result<void>{};
    }
    if constexpr (GatherWriteStream<S>) {
      // The buffered bytes and the large write in one call while both remain.
      while (used_ != 0) {
        const io::ConstBuffer parts[2] = {{storage_.data(), used_}, {data.data(), data.size()}};
        auto n = co_await stream_->write_some(std::span<const io::ConstBuffer>(parts));
        if (!n) co_return n.error();
        const std::size_t from_buffer = std::min(*n, used_);
        drop_front(from_buffer);
        data = data.subspan(*n - from_buffer);
      }
    } else {
      if (auto sent = co_await flush(); !sent) co_return sent;
    }
    co_return co_await send_all(data);
  }
  Task<Result<void>> write(std::string_view text) {
    return write(std::as_bytes(std::span<const char>(text.data(), text.size())));
  }

  /// Sends everything buffered.
  Task<Result<void>> flush() {
    while (used_ != 0) {
      auto n = co_await stream_->write_some(std::span<const std::byte>(storage_.data(), used_));
      if (!n) co_return n.error();
      drop_front(*n);
    }
    co_return Result<void>{};
  }

 private:
  void append(std::span<const std::byte> data) noexcept {
    if (!data.empty()) std::memcpy(storage_.data() + used_, data.data(), data.size());
    used_ += data.size();
  }
  // Removes `n` sent bytes from the front; the rest moves down (only after a short write).
  void drop_front(std::size_t n) noexcept {
    if (n < used_) std::memmove(storage_.data(), storage_.data() + n, used_ - n);
    used_ -= std::min(n, used_);
  }
  Task<Result<void>> send_all(std::span<const std::byte> data) {
    while (!data.empty()) {
      auto n = co_await stream_->write_some(data);
      if (!n) co_return n.error();
      data = data.subspan(*n);
    }
    co_return Result<void>{};
  }

  S* stream_;
  detail::BufferStorage storage_;
  std::size_t used_ = 0;  // buffered bytes are [0, used_) of storage_
};

}  // namespace arbor
