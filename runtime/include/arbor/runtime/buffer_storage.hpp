// BufferStorage: the fixed bytes behind a buffered reader or writer, owned or borrowed.
//
// Invariant: the storage never changes size or address after construction (moving the owner
// moves the pointer, not the bytes), so the only allocation a buffered stream makes is the one
// here, once; none per line or per write.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

namespace arbor::detail {

class BufferStorage {
 public:
  /// Allocates `capacity` bytes once (at least 1), owned here.
  explicit BufferStorage(std::size_t capacity)
      : owned_(new std::byte[capacity == 0 ? 1 : capacity]),
        bytes_(owned_.get(), capacity == 0 ? 1 : capacity) {}
  /// Borrows `storage`: the caller owns it and keeps it alive as long as this.
  explicit BufferStorage(std::span<std::byte> storage) noexcept : bytes_(storage) {}

  BufferStorage(BufferStorage&&) noexcept = default;
  BufferStorage& operator=(BufferStorage&&) noexcept = default;

  std::byte* data() const noexcept { return bytes_.data(); }
  std::size_t size() const noexcept { return bytes_.size(); }

 private:
  std::unique_ptr<std::byte[]> owned_;  // null when borrowed
  std::span<std::byte> bytes_;
};

}  // namespace arbor::detail
