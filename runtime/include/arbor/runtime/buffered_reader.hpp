// BufferedReader: lines, delimited records and peeks over any ReadStream (TcpStream, ...).
//
//   arbor::BufferedReader reader(stream);              // 8 KiB, allocated once, here
//   for (;;) {
//     auto line = co_await reader.read_line();        // Result<std::string_view>, no "\r\n"
//     if (!line) break;                               // end_of_stream: a clean end
//     handle(*line);                                  // valid until the next call on reader
//   }
//
// Buffer: one fixed buffer, either allocated once by the constructor (owned) or given by the
// caller (borrowed: it must outlive the reader). Nothing allocates per line: a line already
// buffered is returned without a coroutine frame, and the frame of a read that must wait for
// the stream comes from arbor's frame pool.
//
// Views: a string_view or span returned by any call points into the buffer and stays valid
// until the next non-const call on this reader (which may move the unread bytes to the
// buffer's front). Copy what you keep.
//
// Invariant: only a successful call consumes. A call that fails (frame_too_long,
// incomplete_frame, a stream error) or is cancelled (a timeout, when_any) leaves every byte it
// read in the buffer, readable by the next call: buffered() shows them, consume() drops them.
// (read_exact and skip_until move or drop bytes as they go: what they had is gone.)
//
// Errors (arbor::Errc unless said): end_of_stream when the stream ended with nothing buffered
// (a clean end); incomplete_frame when it ended in the middle of a line or frame (the partial
// bytes stay buffered); frame_too_long when no delimiter came within the maximum (the maximum
// is never more than the capacity, since a line is returned as one view into the buffer).
//
// Threading: one task at a time, like the stream's own read side. Every awaitable here is a
// Task, or (read_line, read_until) one that runs a Task only when it must wait for the stream:
// move-only, lazy, awaited once, cancelled with its caller (with_timeout, when_any compose).
#pragma once

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>

#include "arbor/result.hpp"
#include "arbor/runtime/buffer_storage.hpp"
#include "arbor/runtime/byte_stream.hpp"
#include "arbor/runtime/error.hpp"
#include "arbor/runtime/ready_or_task.hpp"
#include "arbor/runtime/task.hpp"

namespace arbor {

template <ReadStream S>
class BufferedReader {
  class UntilOp;  // read_until's step, for LineAwaitable (below, private)

 public:
  static constexpr std::size_t kDefaultCapacity = 8 * 1024;
  static constexpr std::size_t kNoLimit = static_cast<std::size_t>(-1);

  /// Reads `stream` (which must outlive the reader) through a buffer of `capacity` bytes,
  /// allocated here, once.
  explicit BufferedReader(S& stream, std::size_t capacity = kDefaultCapacity)
      : stream_(&stream), storage_(capacity) {}
  /// The same through `storage`, which the caller owns and keeps alive as long as the reader.
  BufferedReader(S& stream, std::span<std::byte> storage) noexcept
      : stream_(&stream), storage_(storage) {}

  BufferedReader(BufferedReader&&) noexcept = default;
  BufferedReader& operator=(BufferedReader&&) noexcept = default;

  S& stream() const noexcept { return *stream_; }
  std::size_t capacity() const noexcept { return storage_.size(); }

  /// The bytes read from the stream and not yet consumed (no IO).
  std::span<const std::byte> buffered() const noexcept {
    return {storage_.data() + begin_, end_ - begin_};
  }
  /// Drops the first `n` buffered bytes (n <= buffered().size()).
  void consume(std::size_t n) noexcept {
    assert(n <= end_ - begin_);
    begin_ += std::min(n, end_ - begin_);
  }

  /// The buffered bytes, reading once from the stream first if there are none; an empty span
  /// means the stream has ended. Consumes nothing (consume() does).
  Task<Result<std::span<const std::byte>>> fill() {
    if (begin_ == end_) {
      auto n = co_await read_more();
      if (!n) co_return n.error();
    }
    co_return buffered();
  }
  /// Reads until at least `n` bytes are buffered and returns all of them. frame_too_long if
  /// `n` > capacity(); end_of_stream / incomplete_frame if the stream ends first.
  Task<Result<std::span<const std::byte>>> fill(std::size_t n) {
    if (n > capacity()) co_return make_error_code(Errc::frame_too_long);
    while (end_ - begin_ < n) {
      auto got = co_await read_more();
      if (!got) co_return got.error();
      if (*got == 0) co_return ended();
    }
    co_return buffered();
  }

  /// What read_until and read_line give when awaited: Result<std::string_view>. Completes at
  /// once, with no coroutine frame, when the line is already buffered; otherwise runs a Task.
  using LineAwaitable = detail::ReadyOrTask<Result<std::string_view>, UntilOp>;

  /// The bytes up to and including the next `delimiter`, consumed. frame_too_long if none
  /// comes within min(max, capacity()) bytes.
  LineAwaitable read_until(char delimiter, std::size_t max = kNoLimit) noexcept {
    return LineAwaitable(UntilOp{this, delimiter, std::min(max, capacity()), false});
  }
  /// The next line without its "\n" or "\r\n" (a lone '\r' elsewhere is kept), consumed.
  /// `max` counts the line with its line ending.
  LineAwaitable read_line(std::size_t max = kNoLimit) noexcept {
    return LineAwaitable(UntilOp{this, '\n', std::min(max, capacity()), true});
  }

  /// Skips past the next `delimiter` (included), however far it is, buffered or not: how to
  /// get past a line that was frame_too_long. Gives the bytes skipped.
  Task<Result<std::uint64_t>> skip_until(char delimiter) {
    std::uint64_t skipped = 0;
    for (;;) {
      const char* start = chars() + begin_;
      if (const void* hit = std::memchr(start, delimiter, end_ - begin_)) {
        const auto n = static_cast<std::size_t>(static_cast<const char*>(hit) - start) + 1;
        begin_ += n;
        co_return skipped + n;
      }
      skipped += end_ - begin_;
      begin_ = end_;
      auto got = co_await read_more();
      if (!got) co_return got.error();
      if (*got == 0) co_return make_error_code(Errc::incomplete_frame);
    }
  }

  /// Buffered bytes first, then the stream: at least one byte, 0 at the end of the stream.
  /// A read at least as large as the buffer, with nothing buffered, goes to the stream
  /// directly (no copy). Makes the reader a ReadStream itself.
  Task<Result<std::size_t>> read_some(std::span<std::byte> out) {
    if (out.empty()) co_return std::size_t{0};
    if (begin_ == end_) {
      if (out.size() >= capacity()) co_return co_await stream_->read_some(out);
      auto got = co_await read_more();
      if (!got) co_return got.error();
      if (*got == 0) co_return std::size_t{0};
    }
    co_return take(out);
  }

  /// Fills `out` exactly; end_of_stream if the stream ends first (what arrived is in `out`
  /// and consumed). Large tails bypass the buffer, as read_some does.
  Task<Result<void>> read_exact(std::span<std::byte> out) {
    out = out.subspan(take(out));
    while (!out.empty()) {
      auto got = co_await read_some(out);
      if (!got) co_return got.error();
      if (*got == 0) co_return make_error_code(Errc::end_of_stream);
      out = out.subspan(*got);
    }
    co_return Result<void>{};
  }

 private:
  // What a LineAwaitable asks: the record if it is buffered (try_now), or the Task that waits.
  class UntilOp {
   public:
    UntilOp(BufferedReader* reader, char delimiter, std::size_t limit, bool line) noexcept
        : reader_(reader), delimiter_(delimiter), line_(line), limit_(limit) {}
    std::optional<Result<std::string_view>> try_now() {
      std::size_t scanned = 0;
      return reader_->find(delimiter_, limit_, line_, scanned);
    }
    Task<Result<std::string_view>> wait() { return reader_->wait_until(delimiter_, limit_, line_); }

   private:
    BufferedReader* reader_;
    char delimiter_;
    bool line_;
    std::size_t limit_;
  };

  const char* chars() const noexcept { return reinterpret_cast<const char*>(storage_.data()); }

  // Copies buffered bytes into `out`, consuming them; returns how many.
  std::size_t take(std::span<std::byte> out) noexcept {
    const std::size_t n = std::min(out.size(), end_ - begin_);
    if (n != 0) std::memcpy(out.data(), storage_.data() + begin_, n);
    begin_ += n;
    return n;
  }

  // Looks for `delimiter` in the buffered bytes past `scanned` (bytes already known to hold
  // none: each byte is looked at once however many reads a line takes): the record, consumed
  // (without its line ending if `line`), or frame_too_long once `limit` bytes hold none, or
  // nothing if more must be read. `scanned` grows to what was looked at.
  std::optional<Result<std::string_view>> find(char delimiter, std::size_t limit, bool line,
                                               std::size_t& scanned) noexcept {
    const std::size_t look = std::min(end_ - begin_, limit);
    const char* start = chars() + begin_;
    if (const void* hit = std::memchr(start + scanned, delimiter, look - scanned)) {
      const auto n = static_cast<std::size_t>(static_cast<const char*>(hit) - start) + 1;
      begin_ += n;
      std::string_view record(start, n);
      if (line) {
        record.remove_suffix(1);
        if (!record.empty() && record.back() == '\r') record.remove_suffix(1);
      }
      return Result<std::string_view>(record);
    }
    scanned = look;
    if (scanned >= limit) return Result<std::string_view>(make_error_code(Errc::frame_too_long));
    return std::nullopt;
  }

  // find(), reading more until it gives an answer.
  Task<Result<std::string_view>> wait_until(char delimiter, std::size_t limit, bool line) {
    std::size_t scanned = 0;
    for (;;) {
      if (auto found = find(delimiter, limit, line, scanned)) co_return std::move(*found);
      auto got = co_await read_more();
      if (!got) co_return got.error();
      if (*got == 0) co_return ended();
    }
  }

  // The error for a stream that ended: clean with nothing buffered, else mid-frame.
  std::error_code ended() const noexcept {
    return make_error_code(begin_ == end_ ? Errc::end_of_stream : Errc::incomplete_frame);
  }

  // One read_some into the free tail, after moving the unread bytes to the front (this is what
  // ends the life of views handed out earlier). Bytes read, or 0 at the end of the stream.
  // Callers only ask when the buffer has room: an unconsumed run is shorter than capacity().
  Task<Result<std::size_t>> read_more() {
    if (begin_ != 0) {
      // Usually a partial line: a short move that keeps each read as large as the buffer.
      if (begin_ != end_) std::memmove(storage_.data(), storage_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    assert(end_ < capacity());
    auto got = co_await stream_->read_some(
        std::span<std::byte>(storage_.data() + end_, capacity() - end_));
    if (got) end_ += *got;
    co_return got;
  }

  S* stream_;
  detail::BufferStorage storage_;
  std::size_t begin_ = 0;  // buffered bytes are [begin_, end_) of storage_
  std::size_t end_ = 0;
};

}  // namespace arbor
