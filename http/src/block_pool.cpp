#include "block_pool.hpp"

#if defined(_WIN32)
#include <new>
#else
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace arbor::http {
namespace {

std::size_t page_size() noexcept {
#if defined(_WIN32)
  return 4096;
#else
  return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
#endif
}

std::size_t whole_pages(std::size_t n) noexcept {
  const std::size_t page = page_size();
  return (n + page - 1) / page * page;
}

}  // namespace

BlockPool::BlockPool(std::size_t block_size, std::size_t keep)
    : size_(whole_pages(block_size)), keep_(keep) {
  free_.reserve(keep_);
}

BlockPool::~BlockPool() {
  for (char* block : free_)
    release(block);
}

char* BlockPool::take() noexcept {
  {
    std::lock_guard guard(mutex_);
    ++lent_;
    if (!free_.empty()) {
      char* block = free_.back();
      free_.pop_back();
      return block;
    }
  }
  char* block = allocate();  // outside the lock: a system call
  if (block == nullptr) {
    std::lock_guard guard(mutex_);
    --lent_;
  }
  return block;
}

void BlockPool::give(char* block) noexcept {
  if (block == nullptr) return;
  {
    std::lock_guard guard(mutex_);
    --lent_;
    if (free_.size() < keep_) {
      free_.push_back(block);  // within the reserved capacity: no allocation
      return;
    }
  }
  release(block);
}

std::size_t BlockPool::lent() const noexcept {
  std::lock_guard guard(mutex_);
  return lent_;
}

std::size_t BlockPool::kept() const noexcept {
  std::lock_guard guard(mutex_);
  return free_.size();
}

char* BlockPool::allocate() const noexcept {
#if defined(_WIN32)
  return new (std::nothrow) char[size_];
#else
  void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
#endif
}

void BlockPool::release(char* block) const noexcept {
#if defined(_WIN32)
  delete[] block;
#else
  ::munmap(block, size_);
#endif
}

}  // namespace arbor::http
