// Framing helpers: length-prefixed frames (a u32 big-endian length, then the payload) and
// lines, on a BufferedReader / BufferedWriter.
//
//   auto frame = co_await arbor::read_frame(reader, 64 * 1024);   // Result<span<const byte>>
//   co_await arbor::write_frame(writer, payload);                  // buffered: flush() to send
//   co_await arbor::write_line(writer, "PING");                    // "PING\n"
//
// Invariant: a frame is consumed only once it is whole, so a frame that fails (its length over
// the maximum: frame_too_long; the stream ending inside it: incomplete_frame) or a read that is
// cancelled leaves its header and every payload byte in the reader. A read_frame view lives
// as the reader's views do: until the next call on the reader. The payload is returned as one
// view into the reader's buffer, so the largest frame is capacity() - kFrameHeaderBytes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>

#include "arbor/result.hpp"
#include "arbor/runtime/buffered_reader.hpp"
#include "arbor/runtime/buffered_writer.hpp"
#include "arbor/runtime/error.hpp"
#include "arbor/runtime/task.hpp"

namespace arbor {

inline constexpr std::size_t kFrameHeaderBytes = 4;

/// The next length-prefixed frame's payload, consumed. frame_too_long if its length is over
/// min(max, reader.capacity() - kFrameHeaderBytes); end_of_stream if the stream ended cleanly
/// before it; incomplete_frame if it ended inside it.
template <ReadStream S>
Task<Result<std::span<const std::byte>>> read_frame(BufferedReader<S>& reader, std::size_t max) {
  auto header = co_await reader.fill(kFrameHeaderBytes);
  if (!header) co_return header.error();
  const auto* h = header->data();
  const std::uint32_t length = (std::uint32_t{static_cast<std::uint8_t>(h[0])} << 24) |
                               (std::uint32_t{static_cast<std::uint8_t>(h[1])} << 16) |
                               (std::uint32_t{static_cast<std::uint8_t>(h[2])} << 8) |
                               std::uint32_t{static_cast<std::uint8_t>(h[3])};
  if (length > std::min(max, reader.capacity() - kFrameHeaderBytes))
    co_return make_error_code(Errc::frame_too_long);
  auto whole = co_await reader.fill(kFrameHeaderBytes + length);
  if (!whole) {  // the header had come, so any end of stream is inside the frame
    if (whole.error() == Errc::end_of_stream) co_return make_error_code(Errc::incomplete_frame);
    co_return whole.error();
  }
  const std::span<const std::byte> payload = whole->subspan(kFrameHeaderBytes, length);
  reader.consume(kFrameHeaderBytes + length);  // moves no bytes: the view stays good
  co_return payload;
}

/// Writes `payload` as one length-prefixed frame into `writer` (not flushed). frame_too_long
/// if it is over 2^32 - 1 bytes.
template <WriteStream S>
Task<Result<void>> write_frame(BufferedWriter<S>& writer, std::span<const std::byte> payload) {
  if (payload.size() > std::numeric_limits<std::uint32_t>::max())
    co_return make_error_code(Errc::frame_too_long);
  const auto length = static_cast<std::uint32_t>(payload.size());
  const std::byte header[kFrameHeaderBytes] = {std::byte(length >> 24), std::byte(length >> 16),
                                               std::byte(length >> 8), std::byte(length)};
  if (auto w = co_await writer.write(std::span<const std::byte>(header)); !w) co_return w;
  co_return co_await writer.write(payload);
}

/// Writes `line` and then `ending` ("\n" unless given, "\r\n" for the Internet's text
/// protocols) into `writer` (not flushed).
template <WriteStream S>
Task<Result<void>> write_line(BufferedWriter<S>& writer, std::string_view line,
                              std::string_view ending = "\n") {
  if (auto w = co_await writer.write(line); !w) co_return w;
  co_return co_await writer.write(ending);
}

}  // namespace arbor
