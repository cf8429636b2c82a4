// ScriptedStream: an in-memory byte stream for the buffered reader and writer tests. Each
// read_some returns the next scripted chunk (or as much of it as fits), so a test decides
// exactly where reads split; after the chunks it ends the stream, or fails with `error`.
// Writes are recorded, one entry per write_some call, each taking at most `write_limit` bytes.
// It never suspends, so a test sees the reader's own behaviour, not the kernel's.
#pragma once

#include <cstddef>
#include <cstring>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "arbor/arbor.hpp"

namespace arbor::test {

class ScriptedStream {
 public:
  ScriptedStream() = default;
  explicit ScriptedStream(std::vector<std::string> chunks)
      : chunks_(chunks.begin(), chunks.end()) {}

  /// `text` split at `cuts` (offsets, increasing).
  static ScriptedStream split(std::string_view text, std::vector<std::size_t> cuts) {
    std::vector<std::string> chunks;
    std::size_t at = 0;
    for (std::size_t cut : cuts) {
      chunks.emplace_back(text.substr(at, cut - at));
      at = cut;
    }
    chunks.emplace_back(text.substr(at));
    return ScriptedStream(std::move(chunks));
  }

  Task<Result<std::size_t>> read_some(std::span<std::byte> buffer) {
    ++reads;
    last_read_size = buffer.size();
    while (!chunks_.empty() && chunks_.front().empty())
      chunks_.pop_front();
    if (chunks_.empty()) {
      if (error) co_return error;
      co_return std::size_t{0};
    }
    std::string& chunk = chunks_.front();
    const std::size_t n = std::min(buffer.size(), chunk.size());
    std::memcpy(buffer.data(), chunk.data(), n);
    chunk.erase(0, n);
    co_return n;
  }

  Task<Result<std::size_t>> write_some(std::span<const std::byte> buffer) {
    if (write_error) co_return write_error;
    const std::size_t n = std::min(buffer.size(), write_limit);
    writes.emplace_back(reinterpret_cast<const char*>(buffer.data()), n);
    co_return n;
  }

  std::string written() const {
    std::string all;
    for (const auto& w : writes)
      all += w;
    return all;
  }

  std::error_code error;        // after the chunks: this instead of the end of the stream
  std::error_code write_error;  // every write fails with this when set
  std::size_t write_limit = static_cast<std::size_t>(-1);
  std::vector<std::string> writes;
  int reads = 0;
  std::size_t last_read_size = 0;

 private:
  std::deque<std::string> chunks_;
};

static_assert(ReadStream<ScriptedStream> && WriteStream<ScriptedStream>);
static_assert(!GatherWriteStream<ScriptedStream>);
static_assert(DuplexStream<TcpStream> && GatherWriteStream<TcpStream>);
static_assert(ReadStream<BufferedReader<TcpStream>>);  // readers stack

inline std::span<const std::byte> as_bytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}
inline std::string as_string(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

}  // namespace arbor::test
