// BlockPool: the connections' working memory (parser fields, input, output and scratch), lent
// to a connection while it has a request in hand and given back when it goes idle, so that an
// idle keep-alive connection holds no large buffer.
//
// Invariant: at most `keep` free blocks are kept for reuse (bounded); a block given back beyond
// that is returned to the operating system at once, so memory taken in a spike of busy
// connections is given back when it ends. Blocks come straight from the OS (mmap on POSIX),
// not the heap: a freed heap block inside a fragmented heap would stay resident.
//
// Thread-safe: take() and give() from any thread. The free list is a short critical section
// under a mutex (a pointer move; the system calls happen outside it). Each request on the
// keep-alive path costs one take() and one give(), uncontended in practice.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

namespace arbor::http {

class BlockPool {
 public:
  /// Blocks of `block_size` bytes (rounded up to whole pages), at most `keep` kept free.
  BlockPool(std::size_t block_size, std::size_t keep);
  /// Frees the kept blocks. Every block taken must have been given back.
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  /// A block, aligned for any object; null only if the OS refuses memory. The caller owns it
  /// until it gives it back.
  char* take() noexcept;
  /// Gives `block` (from take(), or null: nothing) back; the pool owns it again.
  void give(char* block) noexcept;

  std::size_t block_size() const noexcept { return size_; }
  /// Blocks lent out now, and kept free now (for tests and metrics).
  std::size_t lent() const noexcept;
  std::size_t kept() const noexcept;

 private:
  char* allocate() const noexcept;
  void release(char* block) const noexcept;

  const std::size_t size_;
  const std::size_t keep_;
  mutable std::mutex mutex_;  // guards the two below
  std::vector<char*> free_;   // capacity keep_: never grows
  std::size_t lent_ = 0;
};

}  // namespace arbor::http
