// Buffer: an owned, fixed-capacity byte buffer. Allocated once; views over it (std::span)
// are what the IO calls take, so the hot path never copies or reallocates.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

namespace arbor {

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::size_t capacity)
      : data_(std::make_unique_for_overwrite<std::byte[]>(capacity)), capacity_(capacity) {}

  std::byte* data() noexcept { return data_.get(); }
  const std::byte* data() const noexcept { return data_.get(); }
  std::size_t capacity() const noexcept { return capacity_; }
  /// Bytes in use (set by the owner after a read).
  std::size_t size() const noexcept { return size_; }
  void set_size(std::size_t n) noexcept { size_ = n < capacity_ ? n : capacity_; }

  /// The whole capacity, e.g. to read into.
  std::span<std::byte> storage() noexcept { return {data_.get(), capacity_}; }
  /// The bytes in use.
  std::span<const std::byte> bytes() const noexcept { return {data_.get(), size_}; }

 private:
  std::unique_ptr<std::byte[]> data_;
  std::size_t capacity_ = 0;
  std::size_t size_ = 0;
};

}  // namespace arbor
